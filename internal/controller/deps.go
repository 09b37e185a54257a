package controller

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/notify"
	"github.com/shepherd-dev/shepherd/internal/scm"
)

// Deps is what the reconcilers share: the clients, the forge hub, the runner reports and the
// notification dispatcher. The manager builds one and hands it to every reconciler.
type Deps struct {
	Client    client.Client
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  recorder.EventRecorder
	Secrets   *SecretReader
	Hub       *scm.Hub
	// Notifier delivers notifications outside the cluster; nil delivers none.
	Notifier *notify.Dispatcher
	// Reports holds the runners' latest reports.
	Reports *ReportStore
	// Deliveries collects notification results for the sessions and the Projects' status.
	Deliveries *deliveryResults
	// Now is the clock (time.Now in production; tests may inject one).
	Now func() time.Time
	// Options are the manager's settings that shape children.
	Options Options
}

// Options are settings from the manager's flags.
type Options struct {
	// RunnerImage holds the runner binary (copied into agent containers) and git.
	RunnerImage string
	// AgentImages are the default images per agent type, used when neither the session nor the
	// Project names one.
	AgentImages map[agentsv1alpha1.AgentType]string
	// RunnerURL is the manager's runner endpoint as seen from agent pods.
	RunnerURL string
	// ImagePullPolicy of the children's containers (IfNotPresent unless set).
	ImagePullPolicy string
	// AccessCheckInterval is how often a Project's repository access is re-checked.
	AccessCheckInterval time.Duration
}

func (d *Deps) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}
