// Package kubectlplugin is `kubectl shepherd` (cmd/kubectl-shepherd): reading and steering
// AgentSessions with the user's own kubeconfig and kubectl's flags. Every request is the user's,
// so Kubernetes RBAC on AgentSessions decides what they see and steer (docs/kubectl-plugin.md).
// Writes are server-side applies with the field manager FieldManager: a field that a GitOps tool
// declares is never silently taken over (a conflict is reported; --force takes it).
package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Version is the plugin's release, set by the release build (-ldflags -X).
var Version = "dev"

// FieldManager owns what the plugin writes; DashboardFieldManager what the dashboard writes
// for its users (Steerer).
const (
	FieldManager          = "kubectl-shepherd"
	DashboardFieldManager = "shepherd-dashboard"
)

// requestTimeout bounds each command's API calls (kubectl's --request-timeout bounds each one).
const requestTimeout = time.Minute

var (
	sessionsGVR = agentsv1alpha1.GroupVersion.WithResource("agentsessions")
	projectsGVR = agentsv1alpha1.GroupVersion.WithResource("projects")
	sessionGVK  = agentsv1alpha1.GroupVersion.WithKind("AgentSession")
)

// Options are what every command shares.
type Options struct {
	// Loading and Overrides are kubectl's connection flags (--kubeconfig, --context, -n, --user,
	// --request-timeout, ...), bound by clientcmd as kubectl binds them.
	Loading   *clientcmd.ClientConfigLoadingRules
	Overrides *clientcmd.ConfigOverrides
	Streams   genericiooptions.IOStreams
	// Now is the clock ages are measured with (tests fix it).
	Now func() time.Time
}

// env is a command's connection: clients built from the user's kubeconfig and the namespace.
type env struct {
	opts *Options
	dyn  dynamic.Interface
	kube kubernetes.Interface
	ns   string
	out  io.Writer
	// fieldManager writes; empty is FieldManager.
	fieldManager string
}

func (e *env) manager() string {
	if e.fieldManager != "" {
		return e.fieldManager
	}
	return FieldManager
}

func (o *Options) env() (*env, error) {
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.Loading, o.Overrides)
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = FieldManager
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &env{opts: o, dyn: dyn, kube: kube, ns: ns, out: o.Streams.Out}, nil
}

func (e *env) sessions(ns string) dynamic.ResourceInterface {
	if ns == "" {
		return e.dyn.Resource(sessionsGVR)
	}
	return e.dyn.Resource(sessionsGVR).Namespace(ns)
}

func (e *env) now() time.Time {
	if e.opts != nil && e.opts.Now != nil {
		return e.opts.Now()
	}
	return time.Now()
}

// NewCommand is the plugin's root command.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{Loading: clientcmd.NewDefaultClientConfigLoadingRules(), Overrides: &clientcmd.ConfigOverrides{}, Streams: streams}
	return newRoot(o)
}

func newRoot(o *Options) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-shepherd",
		Short: "Read and steer Shepherd's agent sessions",
		Long: `kubectl shepherd reads and steers Shepherd's AgentSessions with your kubeconfig:
what you may get, patch or create is what Kubernetes RBAC lets you do on them.
Writes are server-side applies by the field manager "` + FieldManager + `".`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(o.Streams.Out)
	root.SetErr(o.Streams.ErrOut)
	flags := root.PersistentFlags()
	flags.StringVar(&o.Loading.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file.")
	clientcmd.BindOverrideFlags(o.Overrides, flags, clientcmd.RecommendedConfigOverrideFlags(""))
	root.AddCommand(newGet(o), newDescribe(o), newLogs(o), newDashboard(o), newSend(o), newAnswer(o), newApprove(o),
		newSetState(o, "stop", agentsv1alpha1.SessionStopped), newSetState(o, "restore", agentsv1alpha1.SessionRunning), newSpawn(o), newBatch(o), newPick(o),
		&cobra.Command{Use: "version", Short: "Print the plugin's version", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(o.Streams.Out, Version)
			return err
		}})
	return root
}

// run wraps a command's body with its connection and the request timeout.
func run(o *Options, body func(ctx context.Context, e *env, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		e, err := o.env()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
		defer cancel()
		return body(ctx, e, args)
	}
}

// requireNamespace refuses a write without a namespace (kubectl's default applies otherwise).
func (e *env) requireNamespace() error {
	if e.ns == "" {
		return fmt.Errorf("no namespace: pass -n NAMESPACE")
	}
	return nil
}
