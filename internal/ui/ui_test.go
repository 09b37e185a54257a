package ui_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/kubectlplugin"
	"github.com/shepherd-dev/shepherd/internal/transcript"
	"github.com/shepherd-dev/shepherd/internal/ui"
)

// httpFor is a user's HTTP client to the API server (their client certificate), not following
// redirects (the dashboard's forms answer 303).
func httpFor(user string) (*http.Client, string) {
	cfg := users[user]
	hc, err := rest.HTTPClientFor(cfg)
	Expect(err).NotTo(HaveOccurred())
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return hc, strings.TrimRight(cfg.Host, "/")
}

func get(user, path string) (int, string) {
	hc, host := httpFor(user)
	resp, err := hc.Get(host + path)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func post(user, path string, form url.Values) (int, string) {
	hc, host := httpFor(user)
	resp, err := hc.PostForm(host+path, form)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func plugin(user string, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := kubectlplugin.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfs[user]}, args...))
	err := cmd.Execute()
	return out.String() + errOut.String(), err
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func sessionPage(ns, name string) string { return ui.SessionLink("", ns, name) }

func steer(ns, name string) string { return ui.SessionPath(ns, name) + "/steer" }

var _ = Describe("The transcript API and the dashboard, behind the API server", func() {
	aKey := types.NamespacedName{Namespace: "team-a", Name: "widgets-42"}

	It("serves alice the transcript of her namespace's session, to the plugin and as JSON", func() {
		code, body := get("alice", uiPath("team-a", "widgets-42"))
		Expect(code).To(Equal(http.StatusOK), body)
		var list ui.TranscriptList
		Expect(json.Unmarshal([]byte(body), &list)).To(Succeed())
		Expect(list.Entries).To(HaveLen(4))
		Expect(list.Entries[3].Kind).To(Equal(transcript.KindQuestion))

		out, err := plugin("alice", "-n", "team-a", "logs", "widgets-42")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("── turn 1 ── Fix issue 42 of widgets-42"))
		Expect(out).To(ContainSubstring(`→ Bash {"command":"go test ./..."}`))
		Expect(out).To(ContainSubstring("? asks you: Which database should widgets-42 use?"))
		out, err = plugin("alice", "-n", "team-a", "logs", "widgets-42", "--raw", "--tail", "1")
		Expect(err).NotTo(HaveOccurred(), out)
		var e transcript.Entry
		Expect(json.Unmarshal([]byte(strings.TrimSpace(out)), &e)).To(Succeed())
		Expect(e.Seq).To(Equal(uint64(4)))
	})

	It("refuses bob the sessions of team-a on every path, and shows him nothing of them", func() {
		code, body := get("bob", uiPath("team-a", "widgets-42"))
		Expect(code).To(Equal(http.StatusForbidden), body)
		Expect(body).NotTo(ContainSubstring("Which database"))
		// A session that does not exist is refused the same way: bob learns nothing.
		code, _ = get("bob", uiPath("team-a", "no-such-session"))
		Expect(code).To(Equal(http.StatusForbidden))
		out, err := plugin("bob", "-n", "team-a", "logs", "widgets-42")
		Expect(err).To(HaveOccurred())
		Expect(out + err.Error()).To(ContainSubstring("forbidden"))

		code, body = get("bob", sessionPage("team-a", "widgets-42"))
		Expect(code).To(Equal(http.StatusForbidden))
		Expect(body).NotTo(ContainSubstring("Which database"))
		code, body = get("bob", ui.Board)
		Expect(code).To(Equal(http.StatusOK))
		Expect(body).To(ContainSubstring("gadgets-7"), "bob's own session")
		Expect(body).NotTo(ContainSubstring("widgets-42"))
		Expect(body).NotTo(ContainSubstring("team-a"))

		// Steering: refused before any token is looked at.
		code, _ = post("bob", steer("team-a", "widgets-42"), url.Values{"action": {"send"}, "text": {"rm -rf /"}, "csrf": {"00"}})
		Expect(code).To(Equal(http.StatusForbidden))
		s := &agentsv1alpha1.AgentSession{}
		Expect(adm.Get(context.Background(), aKey, s)).To(Succeed())
		Expect(s.Spec.Messages).To(BeEmpty())
	})

	It("shows alice her board and session page, and takes her answer exactly once", func() {
		code, body := get("alice", ui.Board)
		Expect(code).To(Equal(http.StatusOK), body)
		Expect(body).To(ContainSubstring(`data-session="team-a/widgets-42"`))
		Expect(body).NotTo(ContainSubstring("gadgets-7"))
		Expect(body).To(ContainSubstring("Needs you"))

		code, body = get("alice", sessionPage("team-a", "widgets-42"))
		Expect(code).To(Equal(http.StatusOK), body)
		Expect(body).To(ContainSubstring("The agent asks you"))
		Expect(body).To(ContainSubstring("Which database should widgets-42 use?"))
		Expect(body).To(ContainSubstring("go test ./..."))
		m := csrfRE.FindStringSubmatch(body)
		Expect(m).To(HaveLen(2), "the page has steering forms")

		// A form posted from another site carries no token (it cannot read the page).
		code, _ = post("alice", steer("team-a", "widgets-42"), url.Values{"action": {"answer"}, "text": {"drop the tables"}})
		Expect(code).To(Equal(http.StatusForbidden))

		form := url.Values{"action": {"answer"}, "text": {"Use Postgres."}, "csrf": {m[1]}, "id": {"answer-1"}}
		for range 2 { // a double click, a resubmitted form: one message
			code, page := post("alice", steer("team-a", "widgets-42"), form)
			Expect(code).To(Equal(http.StatusOK), page)
			Expect(page).To(ContainSubstring(`id="done"`))
		}
		s := &agentsv1alpha1.AgentSession{}
		Expect(adm.Get(context.Background(), aKey, s)).To(Succeed())
		Expect(s.Spec.Messages).To(HaveLen(1))
		Expect(s.Spec.Messages[0].Text).To(Equal("Use Postgres."))
		Expect(s.Spec.Messages[0].From).To(Equal("alice"))
		Expect(s.ManagedFields).To(ContainElement(HaveField("Manager", kubectlplugin.DashboardFieldManager)))

		// Stop and restore from the page.
		code, page := post("alice", steer("team-a", "widgets-42"), url.Values{"action": {"stop"}, "csrf": {m[1]}})
		Expect(code).To(Equal(http.StatusOK), page)
		Expect(adm.Get(context.Background(), aKey, s)).To(Succeed())
		Expect(s.Spec.State).To(Equal(agentsv1alpha1.SessionStopped))
		code, page = post("alice", steer("team-a", "widgets-42"), url.Values{"action": {"restore"}, "csrf": {m[1]}})
		Expect(code).To(Equal(http.StatusOK), page)
		Expect(adm.Get(context.Background(), aKey, s)).To(Succeed())
		Expect(s.Spec.State).To(Equal(agentsv1alpha1.SessionRunning))
	})

	It("lets a viewer read but not steer", func() {
		code, body := get("viewer", sessionPage("team-a", "widgets-42"))
		Expect(code).To(Equal(http.StatusOK))
		Expect(csrfRE.MatchString(body)).To(BeFalse(), "no steering forms for a reader")
		code, _ = post("viewer", steer("team-a", "widgets-42"), url.Values{"action": {"stop"}, "csrf": {"x"}})
		Expect(code).To(Equal(http.StatusForbidden))
	})

	It("streams new entries to a follower, to the plugin and as server-sent events", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		hc, host := httpFor("alice")
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, host+uiPath("team-a", "widgets-42")+"?follow=true&since=4", nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := hc.Do(req)
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		Expect(resp.Header.Get("Content-Type")).To(Equal("text/event-stream"))

		var pluginOut syncBuffer
		pctx, pcancel := context.WithCancel(ctx)
		defer pcancel()
		go func() {
			defer GinkgoRecover()
			cmd := kubectlplugin.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &pluginOut, ErrOut: &pluginOut})
			cmd.SetArgs([]string{"--kubeconfig", kubeconfs["alice"], "-n", "team-a", "logs", "widgets-42", "-f", "--since-seq", "4"})
			_ = cmd.ExecuteContext(pctx)
		}()
		time.Sleep(500 * time.Millisecond)
		s := &agentsv1alpha1.AgentSession{}
		Expect(adm.Get(ctx, aKey, s)).To(Succeed())
		store.Append(aKey, s.UID, []transcript.Entry{{Seq: 5, Time: time.Now(), Turn: 2, Kind: transcript.KindTurnStarted, Text: "Use Postgres."}})

		sc := bufio.NewScanner(resp.Body)
		var data string
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				data = d
				break
			}
		}
		var e transcript.Entry
		Expect(json.Unmarshal([]byte(data), &e)).To(Succeed())
		Expect(e.Seq).To(Equal(uint64(5)))
		Expect(e.Text).To(Equal("Use Postgres."))
		Eventually(pluginOut.String).Should(ContainSubstring("── turn 2 ── Use Postgres."))
	})

	It("refuses a caller that skips the API server and claims a user in the front-proxy headers", func() {
		pool := x509.NewCertPool()
		Expect(pool.AppendCertsFromPEM(uiCA)).To(BeTrue())
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "shepherd-api.shepherd-system.svc"}}}
		req, _ := http.NewRequest(http.MethodGet, "https://"+uiAddr+uiPath("team-a", "widgets-42"), nil)
		req.Header.Set("X-Remote-User", "alice")
		req.Header.Set("X-Remote-Group", "system:masters")
		resp, err := hc.Do(req)
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized), string(body))
		Expect(string(body)).NotTo(ContainSubstring("Which database"))
	})
})

var _ = Describe("kubectl shepherd dashboard's local proxy", func() {
	It("serves alice the dashboard with her credentials, to this machine's loopback only", func() {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		p := &kubectlplugin.DashboardProxy{Config: users["alice"], Addr: l.Addr().String()}
		h, err := p.Handler()
		Expect(err).NotTo(HaveOccurred())
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
		base := "http://" + l.Addr().String()
		hc := &http.Client{Timeout: 10 * time.Second}

		resp, err := hc.Get(base + "/")
		Expect(err).NotTo(HaveOccurred())
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusOK), "the root leads to the board")
		Expect(string(body)).To(ContainSubstring(`data-session="team-a/widgets-42"`))
		Expect(string(body)).To(ContainSubstring("signed in as alice"))

		// DNS rebinding: a page of evil.example whose name now points at 127.0.0.1.
		req, _ := http.NewRequest(http.MethodGet, base+ui.Board, nil)
		req.Host = "evil.example:" + strings.Split(l.Addr().String(), ":")[1]
		resp, err = hc.Do(req)
		Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusForbidden))

		// Nothing but Shepherd's API group: not the user's Secrets.
		resp, err = hc.Get(base + "/api/v1/namespaces/team-a/secrets")
		Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusNotFound))
	})
})

var _ = Describe("Picking an AgentTask's attempt", func() {
	// An AgentTask of team-a with two attempts, as the manager would have made them: fix-1 with a
	// pull request, fix-2 still without one.
	seed := func(task string) {
		ctx := context.Background()
		t := &agentsv1alpha1.AgentTask{ObjectMeta: metav1.ObjectMeta{Name: task, Namespace: "team-a"}, Spec: agentsv1alpha1.AgentTaskSpec{
			ProjectRef: agentsv1alpha1.LocalObjectReference{Name: "widgets"}, Prompt: "Fix it", Attempts: ptr.To(int32(2)),
			Selection: &agentsv1alpha1.SelectionSpec{Policy: agentsv1alpha1.SelectHuman}}}
		Expect(adm.Create(ctx, t)).To(Succeed())
		t.Status.Attempts = []agentsv1alpha1.AttemptStatus{{Name: task + "-1", PullRequest: 7}, {Name: task + "-2"}}
		Expect(adm.Status().Update(ctx, t)).To(Succeed())
		for i, pr := range []int64{7, 0} {
			s := &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", task, i+1), Namespace: "team-a",
				OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentTask", Name: task, UID: t.UID, Controller: ptr.To(true)}}},
				Spec: agentsv1alpha1.AgentSessionSpec{ProjectRef: agentsv1alpha1.LocalObjectReference{Name: "widgets"}, Prompt: "Fix it",
					PullRequest: &agentsv1alpha1.SessionPullRequest{Draft: ptr.To(true)}}}
			Expect(adm.Create(ctx, s)).To(Succeed())
			s.Status = agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking}
			if pr > 0 {
				s.Status.Phase = agentsv1alpha1.PhasePROpen
				s.Status.PullRequest = &agentsv1alpha1.PullRequestStatus{Number: pr, State: agentsv1alpha1.PullRequestOpen, Draft: true}
			}
			Expect(adm.Status().Update(ctx, s)).To(Succeed())
		}
	}
	pick := func(task string) string {
		t := &agentsv1alpha1.AgentTask{}
		Expect(adm.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: task}, t)).To(Succeed())
		return t.Spec.Selection.Pick
	}

	It("lets alice pick from the attempt's page, and not a viewer", func() {
		seed("pickme")
		code, body := get("viewer", sessionPage("team-a", "pickme-1"))
		Expect(code).To(Equal(http.StatusOK))
		Expect(body).NotTo(ContainSubstring(`id="pick"`))
		code, body = get("alice", sessionPage("team-a", "pickme-2"))
		Expect(code).To(Equal(http.StatusOK))
		Expect(body).NotTo(ContainSubstring(`id="pick"`), "no pull request yet: nothing to pick")
		code, body = get("alice", sessionPage("team-a", "pickme-1"))
		Expect(code).To(Equal(http.StatusOK), body)
		Expect(body).To(ContainSubstring(`id="pick"`))
		m := csrfRE.FindStringSubmatch(body)
		Expect(m).To(HaveLen(2))

		code, page := post("viewer", steer("team-a", "pickme-1"), url.Values{"action": {"pick"}, "csrf": {m[1]}})
		Expect(code).To(Equal(http.StatusForbidden), page)
		Expect(pick("pickme")).To(BeEmpty())

		code, page = post("alice", steer("team-a", "pickme-1"), url.Values{"action": {"pick"}, "csrf": {m[1]}})
		Expect(code).To(Equal(http.StatusOK), page)
		Expect(page).To(ContainSubstring("picked pickme-1"))
		Expect(pick("pickme")).To(Equal("pickme-1"))

		code, page = post("alice", steer("team-a", "widgets-42"), url.Values{"action": {"pick"}, "csrf": {csrfRE.FindStringSubmatch(mustGet("alice", sessionPage("team-a", "widgets-42")))[1]}})
		Expect(code).To(Equal(http.StatusBadRequest), "a session of no task: %s", page)
	})

	It("lets alice pick with kubectl shepherd pick, by name or number, and says what it refuses", func() {
		seed("bynumber")
		out, err := plugin("alice", "-n", "team-a", "pick", "bynumber", "2")
		Expect(err).To(HaveOccurred())
		Expect(out + err.Error()).To(ContainSubstring("attempt bynumber-2 has no pull request yet"))
		out, err = plugin("alice", "-n", "team-a", "pick", "bynumber", "widgets-42")
		Expect(err).To(HaveOccurred(), out)
		Expect(err.Error()).To(ContainSubstring("is not an attempt of task bynumber (its attempts: bynumber-1, bynumber-2)"))
		out, err = plugin("viewer", "-n", "team-a", "pick", "bynumber", "1")
		Expect(err).To(HaveOccurred(), out)
		Expect(pick("bynumber")).To(BeEmpty())

		out, err = plugin("alice", "-n", "team-a", "pick", "bynumber", "1")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("picked bynumber-1"))
		Expect(pick("bynumber")).To(Equal("bynumber-1"))
	})
})

func mustGet(user, path string) string {
	code, body := get(user, path)
	Expect(code).To(Equal(http.StatusOK), body)
	return body
}
