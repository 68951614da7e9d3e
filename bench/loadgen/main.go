// loadgen: a small gRPC load generator for callgate's benchmarks (bench/*.py drive it).
//
// It sends pre-serialized request messages (made by the Python bench, so no protobuf code is
// generated here) to one unary method and prints one JSON object with latencies. Requests are
// read from a file of records, each a 4-byte big-endian length followed by the message bytes;
// request i of the run uses record i modulo the record count (give every call its own record
// when the server needs unique ids). Modes:
//
//	closed: -concurrency N calls in flight for -duration (each worker sends its next call as soon
//	        as the previous answers); latency = send to answer.
//	open:   calls start on a fixed schedule of -rate per second for -duration whatever the
//	        answers do; latency counts from the scheduled start (no coordinated omission).
//	        -trace FILE writes each call as a line: scheduled start and latency (µs), 1 if OK.
//
// Every call must end with status OK; the last answer's bytes can be written with -last so the
// caller can decode and check it. One HTTP/2 connection (one grpc.ClientConn), like an agent's.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// rawCodec passes message bytes through untouched.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	b := v.(*[]byte)
	*b = append((*b)[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

type result struct {
	Mode        string             `json:"mode"`
	N           int                `json:"n"`
	Errors      int                `json:"errors"`
	ErrorCodes  map[string]int     `json:"error_codes"`
	Late        int                `json:"late"`
	ElapsedS    float64            `json:"elapsed_s"`
	Throughput  float64            `json:"throughput_rps"`
	Percentiles map[string]float64 `json:"percentiles_ms"`
	MeanMs      float64            `json:"mean_ms"`
	MaxMs       float64            `json:"max_ms"`
}

func readRecords(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][]byte
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(f, hdr[:]); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		msg := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(f, msg); err != nil {
			return nil, err
		}
		out = append(out, msg)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no requests", path)
	}
	return out, nil
}

func main() {
	target := flag.String("target", "", "gRPC target: host:port or unix:///path")
	method := flag.String("method", "", "full method, e.g. /callgate.v1.Gate/Propose")
	reqs := flag.String("requests", "", "file of length-prefixed request messages")
	mode := flag.String("mode", "closed", "closed or open")
	conc := flag.Int("concurrency", 1, "closed loop: calls in flight")
	rate := flag.Float64("rate", 1000, "open loop: calls started per second")
	dur := flag.Duration("duration", 10*time.Second, "measured duration")
	offset := flag.Int("offset", 0, "index of the first record to use")
	last := flag.String("last", "", "write the last answer's bytes here")
	timeout := flag.Duration("timeout", 10*time.Second, "per-call deadline")
	trace := flag.String("trace", "", "open loop: write one line per call here (scheduled start in us from the run's start, latency in us, 1 if OK else 0)")
	flag.Parse()
	records, err := readRecords(*reqs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	conn, err := grpc.NewClient(*target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	defer conn.Close()

	var next atomic.Int64
	next.Store(int64(*offset))
	var mu sync.Mutex
	codes := map[string]int{}
	var lastResp []byte
	call := func() (time.Duration, bool) {
		i := next.Add(1) - 1
		req := records[int(i)%len(records)]
		var resp []byte
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		t0 := time.Now()
		err := conn.Invoke(ctx, *method, &req, &resp)
		d := time.Since(t0)
		cancel()
		if err != nil {
			mu.Lock()
			codes[status.Code(err).String()]++
			mu.Unlock()
			return d, false
		}
		if *last != "" {
			mu.Lock()
			lastResp = resp
			mu.Unlock()
		}
		return d, true
	}

	var lats []time.Duration
	late := 0
	start := time.Now()
	switch *mode {
	case "closed":
		deadline := start.Add(*dur)
		per := make([][]time.Duration, *conc)
		var wg sync.WaitGroup
		for w := 0; w < *conc; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for time.Now().Before(deadline) {
					if d, ok := call(); ok {
						per[w] = append(per[w], d)
					}
				}
			}(w)
		}
		wg.Wait()
		for _, p := range per {
			lats = append(lats, p...)
		}
	case "open":
		n := int(dur.Seconds() * *rate)
		out := make([]time.Duration, n)
		okv := make([]bool, n)
		var wg sync.WaitGroup
		interval := time.Duration(float64(time.Second) / *rate)
		for k := 0; k < n; k++ {
			at := start.Add(time.Duration(k) * interval)
			if wait := time.Until(at); wait > 0 {
				time.Sleep(wait)
			} else if wait < -time.Millisecond {
				late++
			}
			wg.Add(1)
			go func(k int, at time.Time) {
				defer wg.Done()
				_, ok := call()
				out[k] = time.Since(at)
				okv[k] = ok
			}(k, at)
		}
		wg.Wait()
		for k, d := range out {
			if okv[k] {
				lats = append(lats, d)
			}
		}
		if *trace != "" {
			if err := writeTrace(*trace, out, okv, interval); err != nil {
				fmt.Fprintln(os.Stderr, "loadgen:", err)
				os.Exit(2)
			}
		}
	default:
		fmt.Fprintln(os.Stderr, "loadgen: -mode must be closed or open")
		os.Exit(2)
	}
	elapsed := time.Since(start)
	sort.Slice(lats, func(a, b int) bool { return lats[a] < lats[b] })
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	r := result{Mode: *mode, N: len(lats), ErrorCodes: codes, Late: late,
		ElapsedS: elapsed.Seconds(), Percentiles: map[string]float64{}}
	for _, c := range codes {
		r.Errors += c
	}
	if len(lats) > 0 {
		var sum time.Duration
		for _, d := range lats {
			sum += d
		}
		r.MeanMs = ms(sum / time.Duration(len(lats)))
		r.MaxMs = ms(lats[len(lats)-1])
		for _, p := range []float64{50, 90, 99, 99.9} {
			idx := int(p / 100 * float64(len(lats)))
			if idx >= len(lats) {
				idx = len(lats) - 1
			}
			r.Percentiles[fmt.Sprint(p)] = ms(lats[idx])
		}
		r.Throughput = float64(len(lats)) / elapsed.Seconds()
	}
	if *last != "" && lastResp != nil {
		if err := os.WriteFile(*last, lastResp, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(2)
		}
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(r); err != nil {
		os.Exit(2)
	}
	if r.Errors > 0 {
		os.Exit(1)
	}
}

// writeTrace writes the open loop's calls, one line each: scheduled start (us from the run's
// start), latency from that start (us), 1 when the call answered OK.
func writeTrace(path string, out []time.Duration, okv []bool, interval time.Duration) error {
	var b []byte
	for k, d := range out {
		ok := 0
		if okv[k] {
			ok = 1
		}
		b = fmt.Appendf(b, "%d %d %d\n", (time.Duration(k) * interval).Microseconds(), d.Microseconds(), ok)
	}
	return os.WriteFile(path, b, 0o644)
}
