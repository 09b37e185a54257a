package kubectlplugin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// The plugin against a real API server (envtest): each command as a user whose RBAC allows it,
// and as one whose RBAC does not. The manager does not run here: the sessions' status is written
// as the manager would have; internal/controller's plugin spec runs send and answer against the
// running controllers and a runner.

var (
	adm        client.Client
	kubeconfig = map[string]string{} // user → kubeconfig file
	start      time.Time             // before every fixture was created
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func TestMain(m *testing.M) {
	os.Exit(func() int {
		env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(repoRoot(), "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run through `make test`, which builds the envtest assets")
			return 1
		}
		cfg, err := env.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = env.Stop() }()
		if err := agentsv1alpha1.AddToScheme(scheme.Scheme); err != nil {
			panic(err)
		}
		if adm, err = client.New(cfg, client.Options{Scheme: scheme.Scheme}); err != nil {
			panic(err)
		}
		dir, err := os.MkdirTemp("", "kubectl-shepherd-")
		if err != nil {
			panic(err)
		}
		defer func() { _ = os.RemoveAll(dir) }()
		for u, groups := range map[string][]string{"alice": nil, "bob": nil, "admin": {"system:masters"}} {
			user, err := env.AddUser(envtest.User{Name: u, Groups: append(groups, "system:authenticated")}, nil)
			if err != nil {
				panic(err)
			}
			kc, err := user.KubeConfig()
			if err != nil {
				panic(err)
			}
			kubeconfig[u] = filepath.Join(dir, u)
			if err := os.WriteFile(kubeconfig[u], kc, 0o600); err != nil {
				panic(err)
			}
		}
		start = time.Now()
		if err := fixtures(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "fixtures:", err)
			return 1
		}
		return m.Run()
	}())
}

// editor grants user in ns what `kubectl create rolebinding --clusterrole=edit` gives on
// Shepherd's resources (config/rbac's editor role, which aggregates into edit) and events.
func editor(ctx context.Context, ns, user string) error {
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "shepherd-editor", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"agents.shepherd.dev"}, Resources: []string{"projects", "worktrees", "agentsessions"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
	}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "shepherd-editor-" + user, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: user, APIGroup: "rbac.authorization.k8s.io"}}}
	if err := adm.Create(ctx, role); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	return adm.Create(ctx, rb)
}

// fixtures: team-a (alice edits it) with a Project and three sessions in different states;
// team-b (bob's) with one.
func fixtures(ctx context.Context) error {
	for _, ns := range []string{"team-a", "team-b"} {
		if err := adm.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
		if err := adm.Create(ctx, MakeProject("widgets", ns).Obj()); err != nil {
			return err
		}
	}
	if err := editor(ctx, "team-a", "alice"); err != nil {
		return err
	}
	if err := editor(ctx, "team-b", "bob"); err != nil {
		return err
	}
	t := metav1.NewTime(start.Add(time.Minute).Truncate(time.Second))
	sessions := []struct {
		s  *agentsv1alpha1.AgentSession
		st agentsv1alpha1.AgentSessionStatus
	}{
		{MakeSession("widgets-42", "team-a", "widgets").Issue("42").Agent(agentsv1alpha1.AgentClaudeCode).Obj(), agentsv1alpha1.AgentSessionStatus{
			Phase: agentsv1alpha1.PhasePROpen, PhaseTransitionTime: &t, Branch: "shepherd/42-greet", StartTime: &t,
			Agent: agentsv1alpha1.AgentStatus{Type: agentsv1alpha1.AgentClaudeCode, Model: "claude-sonnet-4-5"},
			PullRequest: &agentsv1alpha1.PullRequestStatus{Number: 17, URL: "https://github.com/acme/widgets/pull/17", State: agentsv1alpha1.PullRequestOpen,
				HeadSHA: "0123456789abcdef0123456789abcdef01234567", Checks: agentsv1alpha1.ChecksPassing, ChecksSummary: "3 passed",
				ReviewDecision: agentsv1alpha1.ReviewApproved, MergeState: agentsv1alpha1.MergeStateClean},
			Activity:  &agentsv1alpha1.ActivityStatus{State: agentsv1alpha1.ActivityIdle, LastActivityTime: &t},
			Usage:     &agentsv1alpha1.UsageStatus{CostUSD: "0.42", InputTokens: 12000, OutputTokens: 3400, Turns: 12},
			Reactions: []agentsv1alpha1.ReactionStatus{{Trigger: agentsv1alpha1.TriggerCIFailed, Attempts: 1, LastAttemptTime: &t}},
		}},
		{MakeSession("widgets-43", "team-a", "widgets").Issue("43").Agent(agentsv1alpha1.AgentCodex).Obj(), agentsv1alpha1.AgentSessionStatus{
			Phase: agentsv1alpha1.PhaseNeedsInput, PhaseTransitionTime: &t, Branch: "shepherd/43-config",
			Agent:    agentsv1alpha1.AgentStatus{Type: agentsv1alpha1.AgentCodex},
			Activity: &agentsv1alpha1.ActivityStatus{State: agentsv1alpha1.ActivityWaitingForInput, Question: "Should the config file be YAML or TOML?", LastActivityTime: &t},
		}},
		{MakeSession("tidy", "team-a", "widgets").Prompt("Tidy the README\nand the docs").Obj(), agentsv1alpha1.AgentSessionStatus{}},
		{MakeSession("widgets-7", "team-b", "widgets").Issue("7").Obj(), agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking, PhaseTransitionTime: &t}},
	}
	for _, f := range sessions {
		if err := adm.Create(ctx, f.s); err != nil {
			return err
		}
		if f.st.Phase == "" {
			continue
		}
		f.s.Status = f.st
		if err := adm.Status().Update(ctx, f.s); err != nil {
			return fmt.Errorf("%s: %w", f.s.Name, err)
		}
	}
	// widgets-42's timeline, as the manager records it.
	var s agentsv1alpha1.AgentSession
	if err := adm.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "widgets-42"}, &s); err != nil {
		return err
	}
	for i, r := range []struct{ reason, msg string }{
		{agentsv1alpha1.ReasonPullRequestOpened, "Opened pull request #17"},
		{agentsv1alpha1.ReasonChecksFailed, "Checks failed: test"},
		{agentsv1alpha1.ReasonChecksPassed, "Checks passed"},
	} {
		at := metav1.NewTime(t.Add(time.Duration(i+1) * time.Minute))
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("widgets-42.%d", i), Namespace: "team-a"},
			InvolvedObject: corev1.ObjectReference{Kind: "AgentSession", APIVersion: agentsv1alpha1.GroupVersion.String(), Namespace: "team-a", Name: s.Name, UID: s.UID},
			Reason:         r.reason, Message: r.msg, Type: corev1.EventTypeNormal, FirstTimestamp: at, LastTimestamp: at, Count: 1,
			Source: corev1.EventSource{Component: "shepherd-manager"}}
		if err := adm.Create(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}

// plugin runs `kubectl shepherd args...` as user, with the clock 3h after the fixtures.
func plugin(user string, args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	o := &Options{Loading: clientcmd.NewDefaultClientConfigLoadingRules(), Overrides: &clientcmd.ConfigOverrides{},
		Streams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errb},
		Now:     func() time.Time { return start.Add(3*time.Hour + 30*time.Second) }}
	cmd := newRoot(o)
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig[user]}, args...))
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

// golden compares got with testdata/<name>.golden; UPDATE=1 rewrites it.
func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if os.Getenv("UPDATE") == "1" {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (UPDATE=1 writes it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (UPDATE=1 rewrites it):\n--- want\n%s\n--- got\n%s", p, want, got)
	}
}

func TestGetTables(t *testing.T) {
	for name, args := range map[string][]string{
		"get":          {"get", "-n", "team-a"},
		"get-wide":     {"get", "-n", "team-a", "-o", "wide"},
		"get-all":      {"get", "-A"},
		"get-project":  {"get", "-n", "team-a", "--project", "widgets", "widgets-43"},
		"describe-42":  {"describe", "-n", "team-a", "widgets-42"},
		"describe-43":  {"describe", "-n", "team-a", "widgets-43"},
		"describe-new": {"describe", "-n", "team-a", "tidy"},
	} {
		t.Run(name, func(t *testing.T) {
			user := "alice"
			if name == "get-all" {
				user = "admin"
			}
			out, errOut, err := plugin(user, args...)
			if err != nil {
				t.Fatalf("%v: %s", err, errOut)
			}
			golden(t, name, out)
		})
	}
}

// -o json and -o yaml print the API's objects: decoded, they equal what the API server returns.
func TestGetOutputRoundTrips(t *testing.T) {
	g := NewWithT(t)
	var list agentsv1alpha1.AgentSessionList
	g.Expect(adm.List(context.Background(), &list, client.InNamespace("team-a"))).To(Succeed())
	for _, format := range []string{"json", "yaml"} {
		out, _, err := plugin("alice", "get", "-n", "team-a", "-o", format)
		g.Expect(err).NotTo(HaveOccurred())
		var got struct {
			Kind  string                        `json:"kind"`
			Items []agentsv1alpha1.AgentSession `json:"items"`
		}
		g.Expect(yaml.Unmarshal([]byte(out), &got)).To(Succeed(), format)
		g.Expect(got.Kind).To(Equal("List"))
		g.Expect(got.Items).To(HaveLen(len(list.Items)))
		for i := range got.Items {
			want := list.Items[i]
			want.APIVersion, want.Kind = agentsv1alpha1.GroupVersion.String(), "AgentSession"
			g.Expect(got.Items[i]).To(Equal(want), format)
		}
		one, _, err := plugin("alice", "get", "-n", "team-a", "widgets-42", "-o", format)
		g.Expect(err).NotTo(HaveOccurred())
		var s agentsv1alpha1.AgentSession
		g.Expect(yaml.Unmarshal([]byte(one), &s)).To(Succeed())
		g.Expect(s.Status.PullRequest.URL).To(Equal("https://github.com/acme/widgets/pull/17"))
	}
}

// RBAC decides: bob, who edits team-b, sees and steers nothing of team-a, whatever the command.
func TestAnotherTeamSeesAndSteersNothing(t *testing.T) {
	g := NewWithT(t)
	for _, args := range [][]string{
		{"get", "-n", "team-a"}, {"get", "-A"}, {"get", "-n", "team-a", "widgets-42"}, {"describe", "-n", "team-a", "widgets-42"},
		{"send", "-n", "team-a", "widgets-42", "hi"}, {"answer", "-n", "team-a", "widgets-43", "YAML"},
		{"approve", "-n", "team-a", "widgets-42"}, {"stop", "-n", "team-a", "widgets-42"}, {"restore", "-n", "team-a", "widgets-42"},
		{"spawn", "-n", "team-a", "widgets", "--issue", "99"},
	} {
		out, _, err := plugin("bob", args...)
		g.Expect(err).To(HaveOccurred(), strings.Join(args, " "))
		g.Expect(err.Error()).To(ContainSubstring(`User "bob" cannot`), strings.Join(args, " "))
		g.Expect(out).NotTo(ContainSubstring("widgets-4"), "nothing of team-a is printed")
	}
	out, _, err := plugin("bob", "get", "-n", "team-b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("widgets-7"))
	var s agentsv1alpha1.AgentSession
	g.Expect(adm.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: "widgets-42"}, &s)).To(Succeed())
	g.Expect(s.Spec.Messages).To(BeEmpty())
	g.Expect(s.Annotations).NotTo(HaveKey(agentsv1alpha1.ApprovedHeadAnnotation))
}

func sessionIn(g Gomega, ns, name string) *agentsv1alpha1.AgentSession {
	var s agentsv1alpha1.AgentSession
	g.Expect(adm.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &s)).To(Succeed())
	return &s
}

// Steering writes are server-side applies by kubectl-shepherd that keep what it wrote before:
// two messages, a stop and an approval all stay; the same id twice is one message.
func TestSteeringKeepsWhatItOwns(t *testing.T) {
	g := NewWithT(t)
	out, _, err := plugin("alice", "send", "-n", "team-b", "widgets-7", "hello")
	g.Expect(err).To(HaveOccurred(), out)

	_, _, err = plugin("bob", "send", "-n", "team-b", "widgets-7", "Also update the changelog.", "--id", "changelog")
	g.Expect(err).NotTo(HaveOccurred())
	_, _, err = plugin("bob", "send", "-n", "team-b", "widgets-7", "Also update the changelog.", "--id", "changelog")
	g.Expect(err).NotTo(HaveOccurred(), "a retry with the same id is the same message")
	out, _, err = plugin("bob", "send", "-n", "team-b", "widgets-7", "And the docs.")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(MatchRegexp(`^message m-\d{8}-\d{6}-[0-9a-f]{8} queued for widgets-7\n$`))
	_, _, err = plugin("bob", "send", "-n", "team-b", "widgets-7", "Another text", "--id", "changelog")
	g.Expect(err).To(MatchError(ContainSubstring("already has a message changelog with another text")))
	_, _, err = plugin("bob", "send", "-n", "team-b", "widgets-7", "x", "--id", "Not_An_ID")
	g.Expect(err).To(MatchError(ContainSubstring("--id")))
	out, _, err = plugin("bob", "stop", "-n", "team-b", "widgets-7")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("session widgets-7: spec.state Stopped\n"))

	s := sessionIn(g, "team-b", "widgets-7")
	g.Expect(s.Spec.State).To(Equal(agentsv1alpha1.SessionStopped))
	g.Expect(s.Spec.Messages).To(HaveLen(2), "the stop kept both messages")
	g.Expect(s.Spec.Messages[0]).To(And(HaveField("ID", "changelog"), HaveField("From", "bob")))
	g.Expect(s.Spec.Messages[1].Text).To(Equal("And the docs."))
	for _, mf := range s.ManagedFields {
		if mf.Manager == FieldManager {
			g.Expect(mf.Operation).To(Equal(metav1.ManagedFieldsOperationApply))
		}
	}
	out, _, err = plugin("bob", "stop", "-n", "team-b", "widgets-7")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("session widgets-7 is already Stopped\n"))
	_, _, err = plugin("bob", "restore", "-n", "team-b", "widgets-7")
	g.Expect(err).NotTo(HaveOccurred())
	s = sessionIn(g, "team-b", "widgets-7")
	g.Expect(s.Spec.State).To(Equal(agentsv1alpha1.SessionRunning))
	g.Expect(s.Spec.Messages).To(HaveLen(2))
}

// A field a GitOps tool applied is not taken over: the conflict is reported with its owner, and
// --force takes it.
func TestGitOpsOwnedStateIsNotFoughtOver(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	// The manifest in Git, applied as Argo CD's server-side sync applies it.
	sync := func() error {
		gitops := &unstructured.Unstructured{Object: map[string]any{"apiVersion": agentsv1alpha1.GroupVersion.String(), "kind": "AgentSession",
			"metadata": map[string]any{"name": "declared", "namespace": "team-a"},
			"spec":     map[string]any{"projectRef": map[string]any{"name": "widgets"}, "issue": "50", "state": "Running", "messages": []any{map[string]any{"id": "from-git", "text": "Keep it small."}}}}}
		return adm.Patch(ctx, gitops, client.Apply, client.FieldOwner("argocd-controller")) //nolint:staticcheck // the GitOps tool's own apply
	}
	g.Expect(sync()).To(Succeed())

	_, _, err := plugin("alice", "stop", "-n", "team-a", "declared")
	g.Expect(err).To(MatchError(ErrConflict))
	g.Expect(err.Error()).To(And(ContainSubstring(".spec.state"), ContainSubstring("argocd-controller"), ContainSubstring("--force")))
	g.Expect(sessionIn(g, "team-a", "declared").Spec.State).To(Equal(agentsv1alpha1.SessionRunning))

	_, _, err = plugin("alice", "send", "-n", "team-a", "declared", "Also the tests.", "--id", "tests")
	g.Expect(err).NotTo(HaveOccurred(), "a message is an item of its own: no conflict with Git's")
	g.Expect(sessionIn(g, "team-a", "declared").Spec.Messages).To(HaveExactElements(HaveField("ID", "from-git"), HaveField("ID", "tests")))
	// The GitOps tool's next sync applies its manifest again: the terminal's message stays.
	g.Expect(sync()).To(Succeed())
	g.Expect(sessionIn(g, "team-a", "declared").Spec.Messages).To(HaveExactElements(HaveField("ID", "from-git"), HaveField("ID", "tests")))

	_, _, err = plugin("alice", "stop", "-n", "team-a", "declared", "--force")
	g.Expect(err).NotTo(HaveOccurred())
	s := sessionIn(g, "team-a", "declared")
	g.Expect(s.Spec.State).To(Equal(agentsv1alpha1.SessionStopped))
	g.Expect(s.Spec.Messages).To(HaveLen(2), "forcing the state took nothing else")
}

func TestApproveAnswerSpawn(t *testing.T) {
	g := NewWithT(t)
	_, _, err := plugin("alice", "approve", "-n", "team-a", "widgets-42", "--head", "fedcba9")
	g.Expect(err).To(MatchError(ContainSubstring("the pull request's head is now 0123456, not fedcba9")))
	out, _, err := plugin("alice", "approve", "-n", "team-a", "widgets-42", "--head", "0123456")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("approved head 0123456 of https://github.com/acme/widgets/pull/17; Shepherd merges it once its checks pass\n"))
	g.Expect(sessionIn(g, "team-a", "widgets-42").Annotations).To(HaveKeyWithValue(agentsv1alpha1.ApprovedHeadAnnotation, "0123456789abcdef0123456789abcdef01234567"))
	_, _, err = plugin("alice", "approve", "-n", "team-a", "widgets-43")
	g.Expect(err).To(MatchError(ContainSubstring("has no pull request to approve yet (phase NeedsInput)")))

	_, _, err = plugin("alice", "answer", "-n", "team-a", "tidy", "YAML")
	g.Expect(err).To(MatchError(ContainSubstring("asks nothing")))
	out, _, err = plugin("alice", "answer", "-n", "team-a", "widgets-43", "YAML, please.", "--id", "format")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("question: Should the config file be YAML or TOML?\nanswer format queued for widgets-43\n"))
	g.Expect(sessionIn(g, "team-a", "widgets-43").Spec.Messages).To(HaveExactElements(And(HaveField("ID", "format"), HaveField("Text", "YAML, please."), HaveField("From", "alice"))))

	out, _, err = plugin("alice", "spawn", "-n", "team-a", "widgets", "--issue", "#99")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("agentsession.agents.shepherd.dev/widgets-99 created\n"))
	s := sessionIn(g, "team-a", "widgets-99")
	g.Expect(s.Spec.Issue).To(Equal("#99"))
	g.Expect(s.Spec.ProjectRef.Name).To(Equal("widgets"))
	_, _, err = plugin("alice", "spawn", "-n", "team-a", "widgets", "--issue", "99")
	g.Expect(err).To(MatchError(ContainSubstring("agentsession widgets-99 exists already")))
	out, _, err = plugin("alice", "spawn", "-n", "team-a", "widgets", "--prompt", "Add a --verbose flag", "--agent", "codex")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(MatchRegexp(`^agentsession.agents.shepherd.dev/widgets-[0-9a-f]{8} created\n$`))
	_, _, err = plugin("alice", "spawn", "-n", "team-a", "gadgets", "--issue", "1")
	g.Expect(err).To(MatchError("no Project gadgets in namespace team-a"))
	_, _, err = plugin("alice", "spawn", "-n", "team-a", "widgets", "--issue", "1", "--prompt", "x")
	g.Expect(err).To(MatchError("pass exactly one of --issue or --prompt"))
	_, _, err = plugin("alice", "spawn", "-n", "team-a", "widgets", "--issue", "not an issue")
	g.Expect(err).To(MatchError(ContainSubstring("issue must be an issue number")), "the API's own validation message")
}
