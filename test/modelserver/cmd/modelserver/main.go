// Command modelserver runs the scripted model server (test/modelserver) as a process, for the
// offline demo and for capturing what a CLI sends:
//
//	modelserver -listen 127.0.0.1:8089 -script script.json -record requests.jsonl
//
// The script is a JSON list of replies (modelserver.Reply); every request is appended to the
// record file as one JSON object per line. It serves until interrupted.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/shepherd-dev/shepherd/test/modelserver"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	scriptFile := flag.String("script", "", "JSON file with the list of replies")
	record := flag.String("record", "", "file to append every request to (JSONL)")
	flag.Parse()

	var script modelserver.Script
	if *scriptFile != "" {
		raw, err := os.ReadFile(*scriptFile)
		if err != nil {
			fail(err)
		}
		if err := json.Unmarshal(raw, &script); err != nil {
			fail(fmt.Errorf("%s: %w", *scriptFile, err))
		}
	}
	srv := modelserver.New(script)
	if err := srv.Start(*listen); err != nil {
		fail(err)
	}
	fmt.Println(srv.URL())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	written := 0
	flush := func() {
		if *record == "" {
			return
		}
		reqs := srv.Requests()
		f, err := os.OpenFile(*record, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "modelserver:", err)
			return
		}
		defer func() { _ = f.Close() }()
		enc := json.NewEncoder(f)
		for _, r := range reqs[written:] {
			_ = enc.Encode(map[string]any{"seq": r.Seq, "api": r.API, "method": r.Method, "path": r.Path, "query": r.Query,
				"reply": r.Reply, "stream": r.Stream, "header": r.Header, "body": json.RawMessage(orNull(r.Body))})
		}
		written = len(reqs)
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-sig:
			flush()
			for _, p := range srv.Problems() {
				fmt.Fprintln(os.Stderr, "modelserver: problem:", p)
			}
			_ = srv.Close()
			return
		case <-tick.C:
			flush()
		}
	}
}

func orNull(b []byte) []byte {
	if len(b) == 0 || !json.Valid(b) {
		raw, _ := json.Marshal(string(b))
		return raw
	}
	return b
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "modelserver:", err)
	os.Exit(1)
}
