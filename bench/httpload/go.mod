module callgate.local/bench/httpload

go 1.22
