// Package modelproxy holds BenchmarkModelProxy: the latency and CPU the model proxy
// (internal/modelproxy) adds to an agent's streamed model request, against the same requests sent
// straight to the model server (test/modelserver) in the same run. Run it with `make bench-proxy`;
// see the benchmark file for the method.
package modelproxy
