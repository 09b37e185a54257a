// Package benchcost measures one call's cost for the benchmarks that compare two ways of doing
// the same thing in the same run (testing.Benchmark cannot run inside a benchmark).
package benchcost

import (
	"runtime"
	"time"
)

// Cost is the time, bytes allocated and allocations of one call.
type Cost struct{ NS, Bytes, Allocs float64 }

// Measure calls f at least minCalls times and for at least minTime, and returns its cost per call.
func Measure(minCalls int, minTime time.Duration, f func()) Cost {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	n := 0
	for ; n < minCalls || time.Since(start) < minTime; n++ {
		f()
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	return Cost{NS: float64(elapsed.Nanoseconds()) / float64(n), Bytes: float64(after.TotalAlloc-before.TotalAlloc) / float64(n),
		Allocs: float64(after.Mallocs-before.Mallocs) / float64(n)}
}
