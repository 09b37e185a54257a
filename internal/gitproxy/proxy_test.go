package gitproxy_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/internal/gitproxy"
	"github.com/shepherd-dev/shepherd/test/gitserver"
)

// forge is a real git http-backend that requires credentials the client never has.
type forge struct {
	srv  *gitserver.Server
	head string
}

func newForge(t *testing.T) *forge {
	t.Helper()
	srv, err := gitserver.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	head, err := srv.Seed("acme/widgets", "main", map[string]string{"README.md": "# widgets\n"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Username, srv.Password = "x-access-token", "s3cret-forge-token"
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return &forge{srv: srv, head: head}
}

// proxy serves a gitproxy.Proxy to the forge that allows pushes to branch only.
func (f *forge) proxy(t *testing.T, branch string) (*httptest.Server, *[]string) {
	t.Helper()
	u, err := url.Parse(f.srv.URL("acme/widgets"))
	if err != nil {
		t.Fatal(err)
	}
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(f.srv.Username+":"+f.srv.Password))
	var refused []string
	p := &gitproxy.Proxy{
		Target: func(*http.Request) (gitproxy.Target, error) {
			return gitproxy.Target{URL: u, Header: http.Header{"Authorization": {auth}}}, nil
		},
		Policy: func(*http.Request) (gitproxy.Policy, error) { return gitproxy.BranchOnly(branch), nil },
		OnRefused: func(_ *http.Request, cmds []gitproxy.RefUpdate, _ error) {
			for _, c := range cmds {
				refused = append(refused, c.Ref)
			}
		},
	}
	ts := httptest.NewServer(http.StripPrefix("/git", p))
	t.Cleanup(ts.Close)
	return ts, &refused
}

// git runs the real git with no credential helper and no prompt: the client has no way to
// authenticate except through the proxy.
func git(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "credential.helper=", "-c", "protocol.allow=always"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), gitserver.CommitterEnv()...)
	cmd.Env = append(cmd.Env, "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := git(t, dir, args...)
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return out
}

func TestProxyAddsCredentialsAndAllowsOnlyTheBranch(t *testing.T) {
	g := NewWithT(t)
	f := newForge(t)
	ts, refused := f.proxy(t, "shepherd/fix-42")
	work := filepath.Join(t.TempDir(), "w")

	// Straight to the forge, without credentials, git is refused: the proxy is the only way in.
	out, err := git(t, "", "clone", f.srv.URL("acme/widgets"), filepath.Join(t.TempDir(), "direct"))
	g.Expect(err).To(HaveOccurred())
	g.Expect(out).To(ContainSubstring("could not read Username"))

	mustGit(t, "", "clone", ts.URL+"/git/acme/widgets.git", work)
	g.Expect(mustGit(t, work, "rev-parse", "HEAD")).To(HavePrefix(f.head))
	mustGit(t, work, "checkout", "-b", "shepherd/fix-42")
	g.Expect(os.WriteFile(filepath.Join(work, "fix.txt"), []byte("fixed\n"), 0o644)).To(Succeed())
	mustGit(t, work, "add", "fix.txt")
	mustGit(t, work, "commit", "-m", "Fix")
	mustGit(t, work, "push", "origin", "shepherd/fix-42")
	g.Expect(f.srv.Ref("acme/widgets", "refs/heads/shepherd/fix-42")).To(Equal(strings.TrimSpace(mustGit(t, work, "rev-parse", "HEAD"))))

	const onlyOwn = "shepherd: only refs/heads/shepherd/fix-42 may be pushed"
	tests := []struct {
		name string
		args []string
		ref  string
		msg  string
	}{
		{"the default branch", []string{"push", "origin", "HEAD:refs/heads/main"}, "refs/heads/main", onlyOwn},
		{"another session's branch", []string{"push", "origin", "HEAD:refs/heads/shepherd/other"}, "refs/heads/shepherd/other", onlyOwn},
		{"a tag", []string{"push", "origin", "HEAD:refs/tags/v1"}, "refs/tags/v1", onlyOwn},
		{"deleting its own branch", []string{"push", "origin", ":refs/heads/shepherd/fix-42"}, "refs/heads/shepherd/fix-42",
			"shepherd: refs/heads/shepherd/fix-42 may not be deleted"},
		{"its branch and main at once", []string{"push", "origin", "HEAD:refs/heads/shepherd/fix-42", "HEAD:refs/heads/main"}, "refs/heads/main", onlyOwn},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			before := f.srv.Ref("acme/widgets", tc.ref)
			mustGit(t, work, "commit", "--allow-empty", "-m", "more "+tc.name)
			out, err := git(t, work, tc.args...)
			g.Expect(err).To(HaveOccurred(), out)
			g.Expect(out).To(ContainSubstring("[remote rejected]"))
			g.Expect(out).To(ContainSubstring(tc.msg))
			g.Expect(f.srv.Ref("acme/widgets", tc.ref)).To(Equal(before), "nothing moved upstream")
			g.Expect(*refused).To(ContainElement(tc.ref))
		})
	}
	g.Expect(f.srv.Ref("acme/widgets", "refs/heads/main")).To(Equal(f.head))
}

func TestProxyServesOnlySmartHTTP(t *testing.T) {
	f := newForge(t)
	ts, _ := f.proxy(t, "b")
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/git/acme/widgets.git/info/refs", http.StatusForbidden}, // dumb HTTP
		{http.MethodGet, "/git/acme/widgets.git/info/refs?service=git-upload-archive", http.StatusForbidden},
		{http.MethodGet, "/git/acme/widgets.git/HEAD", http.StatusNotFound},
		{http.MethodGet, "/git/acme/widgets.git/objects/info/packs", http.StatusNotFound},
		{http.MethodPut, "/git/acme/widgets.git/git-receive-pack", http.StatusNotFound},
		{http.MethodPost, "/git/acme/widgets.git/git-receive-pack", http.StatusBadRequest}, // empty body
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			g := NewWithT(t)
			req, err := http.NewRequest(tc.method, ts.URL+tc.path, nil)
			g.Expect(err).NotTo(HaveOccurred())
			resp, err := http.DefaultClient.Do(req)
			g.Expect(err).NotTo(HaveOccurred())
			_ = resp.Body.Close()
			g.Expect(resp.StatusCode).To(Equal(tc.want))
		})
	}
}

func TestUpstreamChallengeIsNotPassedOn(t *testing.T) {
	g := NewWithT(t)
	f := newForge(t)
	u, _ := url.Parse(f.srv.URL("acme/widgets"))
	// A proxy with the wrong credentials: git must fail without being asked for a password.
	p := &gitproxy.Proxy{Target: func(*http.Request) (gitproxy.Target, error) {
		return gitproxy.Target{URL: u, Header: http.Header{"Authorization": {"Basic d3Jvbmc6d3Jvbmc="}}}, nil
	}}
	ts := httptest.NewServer(p)
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/info/refs?service=git-upload-pack")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
	g.Expect(resp.Header.Get("WWW-Authenticate")).To(BeEmpty())
}

func pkt(s string) string {
	if s == "" {
		return "0000"
	}
	return hex4(len(s)+4) + s
}

func hex4(n int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[n>>12&15], digits[n>>8&15], digits[n>>4&15], digits[n&15]})
}

var (
	zero = strings.Repeat("0", 40)
	oidA = strings.Repeat("a", 40)
	oidB = strings.Repeat("b", 40)
)

func TestReadCommands(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []gitproxy.RefUpdate
		caps    []string
		wantErr bool
	}{
		{"one update with capabilities",
			pkt(oidA+" "+oidB+" refs/heads/x\x00report-status side-band-64k agent=git/2.39\n") + pkt(""),
			[]gitproxy.RefUpdate{{Old: oidA, New: oidB, Ref: "refs/heads/x"}}, []string{"report-status", "side-band-64k", "agent=git/2.39"}, false},
		{"shallow lines first",
			pkt("shallow "+oidA+"\n") + pkt(zero+" "+oidB+" refs/heads/x\x00report-status\n") + pkt(""),
			[]gitproxy.RefUpdate{{Old: zero, New: oidB, Ref: "refs/heads/x"}}, []string{"report-status"}, false},
		{"two updates",
			pkt(oidA+" "+oidB+" refs/heads/x\x00\n") + pkt(oidB+" "+zero+" refs/heads/y\n") + pkt(""),
			[]gitproxy.RefUpdate{{Old: oidA, New: oidB, Ref: "refs/heads/x"}, {Old: oidB, New: zero, Ref: "refs/heads/y"}}, []string{}, false},
		{"a signed push", pkt("push-cert\x00report-status\n") + pkt(""), nil, nil, true},
		{"no commands", pkt(""), nil, nil, true},
		{"no flush", pkt(oidA + " " + oidB + " refs/heads/x\n"), nil, nil, true},
		{"short object id", pkt("abc "+oidB+" refs/heads/x\n") + pkt(""), nil, nil, true},
		{"upper-case hex", pkt(strings.ToUpper(oidA)+" "+oidB+" refs/heads/x\n") + pkt(""), nil, nil, true},
		{"mixed id lengths", pkt(strings.Repeat("a", 64)+" "+oidB+" refs/heads/x\n") + pkt(""), nil, nil, true},
		{"a ref with a space", pkt(oidA+" "+oidB+" refs/heads/x y\n") + pkt(""), nil, nil, true},
		{"a length below 4", "0003", nil, nil, true},
		{"a length over the maximum", "fff1", nil, nil, true},
		{"not hex", "zzzz", nil, nil, true},
		{"v2 delimiter", "0001", nil, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cmds, caps, raw, err := gitproxy.ReadCommands(bufio.NewReader(strings.NewReader(tc.in + "PACK...")))
			if tc.wantErr {
				g.Expect(err).To(MatchError(gitproxy.ErrProtocol))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cmds).To(Equal(tc.want))
			g.Expect(caps).To(Equal(tc.caps))
			g.Expect(string(raw)).To(Equal(tc.in), "every byte consumed is given back, nothing more")
		})
	}
}

func TestBranchOnly(t *testing.T) {
	tests := []struct {
		policy gitproxy.BranchOnly
		u      gitproxy.RefUpdate
		ok     bool
	}{
		{"fix", gitproxy.RefUpdate{Old: zero, New: oidA, Ref: "refs/heads/fix"}, true},
		{"fix", gitproxy.RefUpdate{Old: oidA, New: oidB, Ref: "refs/heads/fix"}, true}, // a force push of its own branch
		{"fix", gitproxy.RefUpdate{Old: oidA, New: zero, Ref: "refs/heads/fix"}, false},
		{"fix", gitproxy.RefUpdate{Old: zero, New: oidA, Ref: "refs/heads/main"}, false},
		{"fix", gitproxy.RefUpdate{Old: zero, New: oidA, Ref: "refs/heads/fix2"}, false},
		{"fix", gitproxy.RefUpdate{Old: zero, New: oidA, Ref: "refs/heads/fix/sub"}, false},
		{"fix", gitproxy.RefUpdate{Old: zero, New: oidA, Ref: "refs/tags/fix"}, false},
		{"fix", gitproxy.RefUpdate{Old: zero, New: oidA, Ref: "refs/remotes/origin/fix"}, false},
		{"fix", gitproxy.RefUpdate{Old: zero, New: oidA, Ref: "fix"}, false},
		{"", gitproxy.RefUpdate{Old: zero, New: oidA, Ref: "refs/heads/"}, false},
	}
	for _, tc := range tests {
		err := tc.policy.Allow(tc.u)
		if (err == nil) != tc.ok {
			t.Errorf("BranchOnly(%q).Allow(%+v) = %v, want ok=%v", tc.policy, tc.u, err, tc.ok)
		}
	}
}

func FuzzReadCommands(f *testing.F) {
	f.Add([]byte(pkt(oidA+" "+oidB+" refs/heads/x\x00report-status side-band-64k\n") + pkt("") + "PACK"))
	f.Add([]byte(pkt("shallow "+oidA+"\n") + pkt(zero+" "+oidB+" refs/heads/x\n") + pkt("")))
	f.Add([]byte(pkt("push-cert\x00\n") + pkt("")))
	f.Add([]byte("0000"))
	f.Add([]byte("00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		cmds, _, raw, err := gitproxy.ReadCommands(bufio.NewReader(bytes.NewReader(in)))
		if err != nil {
			if !errors.Is(err, gitproxy.ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if len(cmds) == 0 || !bytes.HasPrefix(in, raw) {
			t.Fatalf("accepted %q with %d commands, raw not a prefix", in, len(cmds))
		}
		for _, c := range cmds {
			if strings.ContainsAny(c.Ref, " \x00") || c.Ref == "" {
				t.Fatalf("ref %q", c.Ref)
			}
		}
	})
}
