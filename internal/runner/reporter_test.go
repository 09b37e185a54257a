package runner

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/runnerapi/runnerapitest"
)

// TestStateChangeIsNotDebounced: the checkout's report and the agent's start come milliseconds
// apart; the start (a state transition) is sent at once, not after the debounce interval the
// first report opened, and only once more per interval. The interval here is an hour: whatever
// arrives within the test's seconds came through the urgent path.
func TestStateChangeIsNotDebounced(t *testing.T) {
	g := NewWithT(t)
	session := types.NamespacedName{Namespace: "team-a", Name: "debounce"}
	env, err := runnerapitest.Start(session, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(env.Close)
	env.Backend.SetTask(session, runnerapi.Task{Branch: "b"})
	client, err := Channel{ManagerURL: env.URL(), TokenFile: env.TokenFile}.Client()
	g.Expect(err).NotTo(HaveOccurred())
	log := &lockedBuffer{}
	rep := newReporter(client, &runnerapi.Task{}, time.Hour, time.Hour, log)
	defer func() { t.Log(log.String()) }()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go rep.loop(ctx)

	rep.update(func() { rep.workspace = &runnerapi.WorkspaceReport{Path: "/w", Branch: "b"} })
	g.Eventually(func() int { return len(env.Backend.Reports(session)) }).Should(Equal(1), "the checkout's report, at once")
	rep.setActivity(agentsv1alpha1.ActivityActive, "", "", nil)
	g.Eventually(func() *runnerapi.ActivityReport { return env.Backend.Activity(session) }).
		Should(HaveField("State", agentsv1alpha1.ActivityActive), "the agent's start, within the debounce interval")

	// Once per interval: the next transitions wait for it (an agent flipping states cannot
	// make the runner send a report per flip), and nothing is lost (they are queued, in order).
	rep.setActivity(agentsv1alpha1.ActivityWaitingForInput, "which?", "", nil)
	rep.setActivity(agentsv1alpha1.ActivityActive, "", "", nil)
	g.Consistently(func() int { return len(env.Backend.Reports(session)) }, 300*time.Millisecond).Should(Equal(2))
	rep.flush(ctx)
	g.Expect(env.Backend.States(session)).To(Equal([]agentsv1alpha1.ActivityState{
		agentsv1alpha1.ActivityActive, agentsv1alpha1.ActivityWaitingForInput, agentsv1alpha1.ActivityActive}))
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
