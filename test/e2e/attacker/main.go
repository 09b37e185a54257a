// Command attacker is what a steered agent would run: the e2e suite copies it into a real agent
// container and runs it there as the agent's user, and into a pod without a NetworkPolicy to
// show that the targets are alive (test/e2e/trust_test.go). It reads its plan as JSON on stdin
// and prints one JSON result per attempt: reached says whether the attempt got what it wanted.
//
// Every attempt is bounded in time and size, and sends traffic only to the addresses of its plan
// (the local cluster's own).
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Plan is what to try.
type Plan struct {
	// Mode is "agent" (everything) or "control" (only the network targets, which must answer).
	Mode string `json:"mode"`
	// Needles are secrets that must not be found anywhere the agent can read.
	Needles []string `json:"needles"`
	// Files must not be readable.
	Files []string `json:"files"`
	// Checkout is the agent's own checkout; Foreign paths (another session's checkout and
	// home, the runner's state, the spares) must not exist.
	Checkout string   `json:"checkout"`
	Foreign  []string `json:"foreign"`
	// Mirror is the Project's mirror, read-only to agents.
	Mirror string `json:"mirror"`
	// Branches: the session's own, another session's, the default branch.
	OwnBranch     string `json:"ownBranch"`
	OtherBranch   string `json:"otherBranch"`
	DefaultBranch string `json:"defaultBranch"`
	// ForgeGit is the repository on the forge, which the agent must not reach itself.
	ForgeGit string `json:"forgeGit"`
	// Manager is the runner channel's URL; LocalRunner the runner's endpoint on loopback.
	Manager     string `json:"manager"`
	LocalRunner string `json:"localRunner"`
	// TCP targets: name → host:port.
	TCP map[string]string `json:"tcp"`
	// DNS resolvers: name → host:port.
	DNS map[string]string `json:"dns"`
	// Proxy: the URL that must answer through the egress proxy, and those that must not.
	ProxyAllowed string            `json:"proxyAllowed"`
	ProxyDenied  map[string]string `json:"proxyDenied"`
	// ConnectDenied are host:port the proxy must refuse to tunnel to.
	ConnectDenied map[string]string `json:"connectDenied"`
}

// Result is one attempt.
type Result struct {
	Attempt string `json:"attempt"`
	Reached bool   `json:"reached"`
	Detail  string `json:"detail"`
}

var out = json.NewEncoder(os.Stdout)

func report(attempt string, reached bool, format string, args ...any) {
	_ = out.Encode(Result{Attempt: attempt, Reached: reached, Detail: fmt.Sprintf(format, args...)})
}

func main() {
	var p Plan
	if err := json.NewDecoder(io.LimitReader(os.Stdin, 1<<20)).Decode(&p); err != nil {
		fmt.Fprintln(os.Stderr, "read the plan:", err)
		os.Exit(2)
	}
	if p.Mode == "agent" {
		files(p)
		environment(p)
		processes()
		fileSystem(p)
		channel(p)
		pushes(p)
		foreign(p)
		mirror(p)
		proxy(p)
	}
	network(p)
}

func files(p Plan) {
	for _, f := range p.Files {
		b, err := os.ReadFile(f)
		report("read "+f, err == nil, "%d bytes, %v", len(b), err)
	}
}

// environment looks for the needles and the runner's variables in every environment it can
// read: its own and each visible process's.
func environment(p Plan) {
	markers := append([]string{"SHEPHERD_TOKEN_FILE=", "SHEPHERD_MANAGER_URL=", "SHEPHERD_CA_FILE="}, p.Needles...)
	envs := map[string]string{"own": strings.Join(os.Environ(), "\n")}
	self := strconv.Itoa(os.Getpid())
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil {
			envs["pid "+e.Name()] = string(b)
		}
	}
	for where, env := range envs {
		for _, m := range markers {
			if strings.Contains(env, m) {
				report("environment holds a secret or the runner's settings", true, "%s has %q", where, redact(m))
				return
			}
		}
	}
	report("environment holds a secret or the runner's settings", false, "searched %d environments", len(envs))
}

// processes lists processes of other users: with a shared process namespace the runner's would
// show.
func processes() {
	uid := strconv.Itoa(os.Getuid())
	entries, _ := os.ReadDir("/proc")
	var others, all []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		all = append(all, e.Name())
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] != uid {
				others = append(others, e.Name()+" (uid "+f[1]+")")
			}
		}
	}
	report("see the runner's processes", len(others) > 0, "%d processes visible, of other users: %v", len(all), others)
}

// fileSystem reads every file it can (below a size) looking for the needles.
func fileSystem(p Plan) {
	const maxFile, maxTotal = 8 << 20, 1 << 30
	deadline := time.Now().Add(90 * time.Second)
	var total int64
	files, found := 0, ""
	_ = filepath.WalkDir("/", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			switch path {
			case "/proc", "/sys", "/dev":
				return filepath.SkipDir
			}
			return nil
		}
		if found != "" || total > maxTotal || time.Now().After(deadline) {
			return filepath.SkipAll
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Size() > maxFile {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		files++
		total += int64(len(b))
		for _, n := range p.Needles {
			if n != "" && strings.Contains(string(b), n) {
				found = path
			}
		}
		return nil
	})
	report("find a secret in a readable file", found != "", "read %d files (%d bytes); found in %q", files, total, found)
}

// channel calls the manager's runner channel as the session, without the runner's token, and
// asks the runner's loopback endpoint for what only the channel serves.
func channel(p Plan) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: nil, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the attacker does not care who answers
	}}
	for name, auth := range map[string]string{"without a token": "", "with a forged token": "Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln"} {
		status, err := get(hc, p.Manager+"/runner/v1/task", auth)
		report("call the manager's channel "+name, status == http.StatusOK, "status %d, %v", status, err)
	}
	status, err := get(hc, p.LocalRunner+"/runner/v1/task", "")
	report("get the task from the runner's loopback endpoint", status == http.StatusOK, "status %d, %v", status, err)
}

func get(hc *http.Client, u, auth string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, nil
}

// pushes tries every ref it must not write, through the runner's endpoint (origin) and straight
// to the forge; and its own branch, which must work.
func pushes(p Plan) {
	g := func(env []string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", p.Checkout}, args...)...)
		cmd.Env = append(os.Environ(), append([]string{"GIT_TERMINAL_PROMPT=0"}, env...)...)
		b, err := cmd.CombinedOutput()
		return lastLines(string(b), 3), err
	}
	if o, err := g(nil, "commit", "--allow-empty", "-m", "attacker's commit"); err != nil {
		report("make a commit to push", false, "%s %v", o, err)
		return
	}
	for name, refspec := range map[string]string{
		"push the default branch":         "HEAD:refs/heads/" + p.DefaultBranch,
		"force-push the default branch":   "+HEAD:refs/heads/" + p.DefaultBranch,
		"push another session's branch":   "+HEAD:refs/heads/" + p.OtherBranch,
		"push a new branch":               "HEAD:refs/heads/attacker/new",
		"push a tag":                      "HEAD:refs/tags/attacker",
		"delete the session's own branch": ":refs/heads/" + p.OwnBranch,
	} {
		o, err := g(nil, "push", "origin", refspec)
		report(name+" through origin", err == nil, "%s", o)
	}
	noProxy := []string{"HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy="}
	o, err := g(noProxy, "push", p.ForgeGit, "HEAD:refs/heads/"+p.DefaultBranch)
	report("push the default branch straight to the forge", err == nil, "%s", o)
	o, err = g(nil, "push", p.ForgeGit, "HEAD:refs/heads/"+p.DefaultBranch)
	report("push the default branch to the forge through the egress proxy", err == nil, "%s", o)
	o, err = g(nil, "push", "origin", "HEAD:refs/heads/"+p.OwnBranch)
	report("legit: push the session's own branch", err == nil, "%s", o)
}

// foreign tries another session's checkout and home, the runner's state and the spares.
func foreign(p Plan) {
	for _, f := range p.Foreign {
		_, serr := os.Stat(f)
		werr := os.WriteFile(filepath.Join(f, "attacker"), []byte("x"), 0o644)
		entries, rerr := os.ReadDir(f)
		report("reach "+f, serr == nil || werr == nil || rerr == nil, "stat: %v; write: %v; list: %d entries, %v", serr, werr, len(entries), rerr)
	}
	// Whatever the agent's mount namespace shows of the volume.
	var mounts []string
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], "/shepherd/workspace") {
				mounts = append(mounts, fields[4]+" (root "+fields[3]+")")
			}
		}
		_ = f.Close()
	}
	whole := false
	for _, m := range mounts {
		if strings.HasPrefix(m, "/shepherd/workspace (") {
			whole = true
		}
	}
	report("mount the whole volume", whole, "volume mounts: %v", mounts)
}

// mirror tries to write the shared mirror's config, hooks and objects.
func mirror(p Plan) {
	_, err := os.ReadFile(filepath.Join(p.Mirror, "HEAD"))
	report("legit: read the mirror", err == nil, "%v", err)
	f, err := os.OpenFile(filepath.Join(p.Mirror, "config"), os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.WriteString("[core]\n\tfsmonitor = /tmp/attacker\n")
		_ = f.Close()
	}
	report("write the mirror's config", err == nil, "%v", err)
	err = os.WriteFile(filepath.Join(p.Mirror, "hooks", "post-checkout"), []byte("#!/bin/sh\nid > /tmp/pwned\n"), 0o755)
	report("plant a hook in the mirror", err == nil, "%v", err)
	err = os.WriteFile(filepath.Join(p.Mirror, "objects", "attacker"), []byte("x"), 0o644)
	report("write the mirror's objects", err == nil, "%v", err)
}

// proxy asks the egress proxy for the allowed host and for others.
func proxy(p Plan) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
	status, err := get(hc, p.ProxyAllowed, "")
	report("legit: an allowed host name through the egress proxy", status == http.StatusOK, "status %d, %v", status, err)
	for name, u := range p.ProxyDenied {
		status, err := get(hc, u, "")
		report("through the egress proxy: "+name, status == http.StatusOK, "status %d, %v", status, err)
	}
	proxyURL, err := http.ProxyFromEnvironment(&http.Request{URL: &url.URL{Scheme: "https", Host: "example.test"}})
	if err != nil || proxyURL == nil {
		report("find the egress proxy", false, "no HTTPS_PROXY: %v", err)
		return
	}
	for name, target := range p.ConnectDenied {
		status, err := connect(proxyURL.Host, target)
		report("tunnel through the egress proxy: "+name, status == http.StatusOK, "CONNECT %s: status %d, %v", target, status, err)
	}
}

func connect(proxy, target string) (int, error) {
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// network connects to each TCP target and asks each DNS resolver a question.
func network(p Plan) {
	for name, addr := range p.TCP {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err == nil {
			_ = c.Close()
		}
		report("connect to "+name, err == nil, "%s: %v", addr, err)
	}
	for name, addr := range p.DNS {
		err := dnsQuery(addr)
		report("ask "+name, err == nil, "%s: %v", addr, err)
	}
}

// dnsQuery sends one A question for attacker.example.test and waits 3s for an answer.
func dnsQuery(addr string) error {
	c, err := net.DialTimeout("udp", addr, 3*time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	q := []byte{0x13, 0x37, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, label := range strings.Split("attacker.example.test", ".") {
		q = append(q, byte(len(label)))
		q = append(q, label...)
	}
	q = append(q, 0, 0, 1, 0, 1)
	if _, err := c.Write(q); err != nil {
		return err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if n < 12 || binary.BigEndian.Uint16(buf) != 0x1337 {
		return errors.New("not an answer to the question")
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// redact shows a secret's first characters only.
func redact(s string) string {
	if strings.HasSuffix(s, "=") {
		return s
	}
	return s[:min(4, len(s))] + "…"
}
