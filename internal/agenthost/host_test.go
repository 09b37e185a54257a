package agenthost_test

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/internal/agenthost"
)

func serve(t *testing.T) (*agenthost.Server, *agenthost.Client, context.CancelFunc) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := agenthost.NewServer()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv, agenthost.NewClient(l.Addr().String()), cancel
}

func TestExecStreamsOutputAndExitCode(t *testing.T) {
	g := NewWithT(t)
	_, c, _ := serve(t)
	dir := t.TempDir()
	// The argument list reaches the program unchanged: no shell ever sees it.
	hostile := "$(touch pwned); `id` | tee x"
	out, errOut, code, err := c.Output(context.Background(), agenthost.ExecRequest{
		Args: []string{"sh", "-c", `printf '%s\n' "$1"; echo "$GREETING" >&2; cat; exit 3`, "sh", hostile},
		Dir:  dir, Env: []string{"GREETING=hello"}, Stdin: []byte("from stdin\n"),
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(3))
	g.Expect(string(out)).To(Equal(hostile + "\nfrom stdin\n"))
	g.Expect(string(errOut)).To(Equal("hello\n"))
	g.Expect(filepath.Join(dir, "pwned")).NotTo(BeAnExistingFile())
}

func TestOutputArrivesBeforeTheProgramEnds(t *testing.T) {
	g := NewWithT(t)
	_, c, _ := serve(t)
	gate := filepath.Join(t.TempDir(), "gate")
	p, err := c.Start(context.Background(), agenthost.ExecRequest{
		Args: []string{"sh", "-c", `echo first; while [ ! -e "$1" ]; do sleep 0.05; done; echo second`, "sh", gate},
	})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _, _ = io.Copy(io.Discard, p.Stderr) }()
	buf := make([]byte, 6)
	_, err = io.ReadFull(p.Stdout, buf)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(buf)).To(Equal("first\n"), "streamed while the program still waits for the gate")
	g.Expect(os.WriteFile(gate, nil, 0o644)).To(Succeed())
	rest, err := io.ReadAll(p.Stdout)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(rest)).To(Equal("second\n"))
	code, err := p.Wait()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(BeZero())
}

func TestStopSignalsTheProcessGroup(t *testing.T) {
	g := NewWithT(t)
	_, c, _ := serve(t)
	marker := filepath.Join(t.TempDir(), "child-alive")
	// A child that ignores nothing: SIGTERM to the group reaches it too.
	p, err := c.Start(context.Background(), agenthost.ExecRequest{
		Args:  []string{"sh", "-c", `(sleep 30; touch "$1") & echo started; wait`, "sh", marker},
		Grace: time.Second,
	})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _, _ = io.Copy(io.Discard, p.Stderr) }()
	buf := make([]byte, 8)
	_, err = io.ReadFull(p.Stdout, buf)
	g.Expect(err).NotTo(HaveOccurred())
	p.Stop()
	_, _ = io.Copy(io.Discard, p.Stdout)
	_, _ = p.Wait()
	g.Consistently(func() bool { _, err := os.Stat(marker); return err == nil }).WithTimeout(500 * time.Millisecond).Should(BeFalse())
}

func TestHostStoppingSaysSo(t *testing.T) {
	g := NewWithT(t)
	_, c, cancel := serve(t)
	p, err := c.Start(context.Background(), agenthost.ExecRequest{Args: []string{"sh", "-c", "echo started; sleep 30"}, Grace: time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _, _ = io.Copy(io.Discard, p.Stderr) }()
	buf := make([]byte, 8)
	_, err = io.ReadFull(p.Stdout, buf)
	g.Expect(err).NotTo(HaveOccurred())
	cancel() // the pod is going away: the host stops the program
	_, _ = io.Copy(io.Discard, p.Stdout)
	code, err := p.Wait()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(128 + 15))
	g.Expect(p.Stopped()).To(BeTrue(), "a stop of the host, not a crash of the program")
}

func TestStartErrorsAndRefusals(t *testing.T) {
	g := NewWithT(t)
	_, c, _ := serve(t)
	_, _, code, err := c.Output(context.Background(), agenthost.ExecRequest{Args: []string{"no-such-program-here"}})
	var se *agenthost.StartError
	g.Expect(err).To(BeAssignableToTypeOf(se))
	g.Expect(code).To(Equal(127))
	_, err = c.Start(context.Background(), agenthost.ExecRequest{})
	g.Expect(err).To(MatchError(ContainSubstring("exec needs a program")))
	_, err = c.Start(context.Background(), agenthost.ExecRequest{Args: []string{"true"}, Env: []string{"NOEQUALS"}})
	g.Expect(err).To(MatchError(ContainSubstring("is not KEY=VALUE")))
}

func TestDirAndExit(t *testing.T) {
	g := NewWithT(t)
	srv, c, _ := serve(t)
	dir := filepath.Join(t.TempDir(), "a", "b")
	entries, err := c.Dir(context.Background(), dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(BeEmpty())
	g.Expect(os.WriteFile(filepath.Join(dir, "history"), nil, 0o644)).To(Succeed())
	entries, err = c.Dir(context.Background(), dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(Equal([]string{"history"}))
	_, err = c.Dir(context.Background(), "relative")
	g.Expect(err).To(MatchError(ContainSubstring("absolute path")))

	g.Expect(c.Exit(context.Background(), 3)).To(Succeed())
	g.Expect(srv.Exited()).To(Receive(Equal(3)))
	g.Expect(c.Exit(context.Background(), 300)).To(MatchError(ContainSubstring("between 0 and 255")))
}

func TestReadyGatesHealth(t *testing.T) {
	g := NewWithT(t)
	srv, c, _ := serve(t)
	ready := make(chan struct{})
	srv.Ready = func() error {
		select {
		case <-ready:
			return nil
		default:
			return io.EOF
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	g.Expect(c.WaitReady(ctx)).To(MatchError(ContainSubstring("did not become ready")))
	close(ready)
	g.Expect(c.WaitReady(context.Background())).To(Succeed())
	g.Expect(strings.HasPrefix(c.BaseURL, "http://127.0.0.1:")).To(BeTrue())
}
