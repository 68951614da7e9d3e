// httpload: a closed-loop HTTP/1.1 load client (keep-alive, one connection per worker) for the
// peer benchmark (bench/bench_peers.py). Standard library only. Bodies are read from a file of
// length-prefixed records (4-byte big-endian length, as bench/loadgen reads) and POSTed in turn;
// -get GETs the URL instead (a server's bare floor). The result is one JSON object on stdout, shaped like bench/loadgen's.
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

type result struct {
	Mode        string             `json:"mode"`
	N           int                `json:"n"`
	Errors      int                `json:"errors"`
	ErrorCodes  map[string]int     `json:"error_codes"`
	ElapsedS    float64            `json:"elapsed_s"`
	Throughput  float64            `json:"throughput_rps"`
	Percentiles map[string]float64 `json:"percentiles_ms"`
	MeanMs      float64            `json:"mean_ms"`
	MaxMs       float64            `json:"max_ms"`
}

func readRecords(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for len(data) >= 4 {
		n := int(binary.BigEndian.Uint32(data[:4]))
		if len(data) < 4+n {
			return nil, fmt.Errorf("%s: truncated record", path)
		}
		out = append(out, data[4:4+n])
		data = data[4+n:]
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no requests", path)
	}
	return out, nil
}

func main() {
	url := flag.String("url", "", "URL to POST to")
	reqs := flag.String("requests", "", "file of length-prefixed request bodies")
	conc := flag.Int("concurrency", 1, "calls in flight (one keep-alive connection each)")
	dur := flag.Duration("duration", 10*time.Second, "measured duration")
	last := flag.String("last", "", "write the last answer's body here")
	get := flag.Bool("get", false, "GET the URL instead (the bodies are ignored)")
	flag.Parse()
	bodies, err := readRecords(*reqs)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: *conc, MaxConnsPerHost: *conc, ForceAttemptHTTP2: false},
	}
	var next atomic.Int64
	var mu sync.Mutex
	var lat []float64
	var lastBody []byte
	codes := map[string]int{}
	errors := 0
	deadline := time.Now().Add(*dur)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			for time.Now().Before(deadline) {
				i := int(next.Add(1)-1) % len(bodies)
				t0 := time.Now()
				var resp *http.Response
				var err error
				if *get {
					resp, err = client.Get(*url)
				} else {
					resp, err = client.Post(*url, "application/json", bytes.NewReader(bodies[i]))
				}
				var body []byte
				code := ""
				if err == nil {
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						code = fmt.Sprintf("HTTP %d", resp.StatusCode)
					}
				}
				if err != nil {
					code = "transport"
				}
				el := time.Since(t0).Seconds() * 1e3
				if code != "" {
					mu.Lock()
					errors++
					codes[code]++
					mu.Unlock()
					continue
				}
				mine = append(mine, el)
				if *last != "" {
					mu.Lock()
					lastBody = body
					mu.Unlock()
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	sort.Float64s(lat)
	pct := map[string]float64{}
	sum, max := 0.0, 0.0
	for _, v := range lat {
		sum += v
		if v > max {
			max = v
		}
	}
	if len(lat) > 0 {
		for _, p := range []float64{50, 90, 99, 99.9} {
			k := int(p / 100 * float64(len(lat)))
			if k >= len(lat) {
				k = len(lat) - 1
			}
			pct[fmt.Sprintf("%g", p)] = lat[k]
		}
	}
	mean := 0.0
	if len(lat) > 0 {
		mean = sum / float64(len(lat))
	}
	if *last != "" && lastBody != nil {
		_ = os.WriteFile(*last, lastBody, 0o644)
	}
	_ = json.NewEncoder(os.Stdout).Encode(result{
		Mode: "closed", N: len(lat), Errors: errors, ErrorCodes: codes, ElapsedS: elapsed,
		Throughput: float64(len(lat)) / elapsed, Percentiles: pct, MeanMs: mean, MaxMs: max,
	})
}
