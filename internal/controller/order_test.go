package controller_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/controller"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// queueReady is the number of ready items in the session controller's queue (at every
// priority), from controller-runtime's own gauge (workqueue_depth). The gauge is process-wide
// and outlives a stopped manager's queue, so callers compare a reading with an earlier one.
func queueReady() float64 {
	v, _ := sample(gather(), "workqueue_depth", map[string]string{"name": "agentsession"})
	return v
}

// Serial: it holds the session controller's one worker (the suite runs one per controller,
// ctrlConfig) while it queues sessions, which would stall any spec running beside it.
var _ = Describe("Work in order", Serial, func() {
	It("reconciles a session whose runner reports Active to Working before the first reconcile of newer sessions queued before its news", func() {
		// Issue 23's ordering property, through the whole manager, as a fan-out meets it: a
		// session's first reconcile comes after thousands of newer sessions were queued, so its
		// next item in the queue (the spawn deadline's timer, its children's events) is younger
		// than their creates; when its runner reports, it must still go before them. The suite's
		// session controller has one worker, so the order in which it takes its queue is the
		// order of the reconciles: an action hook holds that worker in one session's reconcile
		// while the others queue.
		Expect(ctrlConfig().MaxConcurrentReconciles).To(BeNumerically("<=", 1), "the order of reconciles is the queue's order only with one worker")
		w := newWorld()
		create(w.project().Obj())
		firstKey := types.NamespacedName{Namespace: w.ns, Name: "first"}
		holder := types.NamespacedName{Namespace: w.ns, Name: "hold"}
		const newer = 20
		gate1, held1 := make(chan struct{}), make(chan struct{})
		gate2, held2 := make(chan struct{}), make(chan struct{})
		var once1, once2, release1, release2 sync.Once
		open1 := func() { release1.Do(func() { close(gate1) }) }
		open2 := func() { release2.Do(func() { close(gate2) }) }
		wait := func(ctx context.Context, gate <-chan struct{}) error {
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		var mu sync.Mutex
		var secondHolder string
		phaseOfFirst := map[string]agentsv1alpha1.SessionPhase{} // at each newer session's first action
		hook := controller.ActionHook(func(ctx context.Context, point controller.ActionPoint, k types.NamespacedName, _ lifecycle.Action) error {
			if point != controller.BeforeAction || k.Namespace != w.ns {
				return nil
			}
			if k == holder {
				once1.Do(func() { close(held1) })
				return wait(ctx, gate1)
			}
			if !strings.HasPrefix(k.Name, "new-") {
				return nil
			}
			mu.Lock()
			_, seen := phaseOfFirst[k.Name]
			mu.Unlock()
			if seen {
				return nil
			}
			// Read from the API server, not the manager's cache: what the first session's
			// reconcile wrote, if it ran.
			s := &agentsv1alpha1.AgentSession{}
			if err := k8sClient.Get(ctx, firstKey, s); err != nil {
				return err
			}
			mu.Lock()
			phaseOfFirst[k.Name] = s.Status.Phase
			hold := secondHolder == ""
			if hold {
				secondHolder = k.Name
			}
			mu.Unlock()
			if hold {
				once2.Do(func() { close(held2) })
				return wait(ctx, gate2)
			}
			return nil
		})
		mgr.actionHook.Store(&hook)
		DeferCleanup(func() {
			open1()
			open2()
			mgr.actionHook.Store(nil)
		})

		By("a session holds the worker; the first session and the newer ones are created and queued behind it")
		create(MakeSession(holder.Name, w.ns, "widgets").Prompt("Hold").Obj())
		Eventually(held1).Should(BeClosed(), "the worker is inside the holder's first reconcile")
		base := queueReady()
		create(MakeSession(firstKey.Name, w.ns, "widgets").Prompt("First").Obj())
		for i := 1; i <= newer; i++ {
			create(MakeSession(fmt.Sprintf("new-%02d", i), w.ns, "widgets").Prompt("Newer").Obj())
		}
		Eventually(func() float64 { return queueReady() - base }).Should(BeNumerically(">=", newer+1), "all of them are queued")

		By("the worker takes the first session (the oldest), then a newer one, which holds it again")
		open1()
		Eventually(held2).Should(BeClosed())
		first := w.agent(firstKey.Name)
		first.pod() // the first session's first reconcile ran, after the newer ones were queued

		By("the first session's pod runs, its Worktree is Ready and its runner reports Active, while the worker is held")
		first.start()
		Eventually(worktreeStatus(w.ns, first.name)).Should(HaveField("Phase", agentsv1alpha1.WorktreeReady))
		first.report(agentsv1alpha1.ActivityActive)
		// What its reconcile will read, in the manager's cache and its report store.
		Eventually(func(g Gomega) {
			wt := &agentsv1alpha1.Worktree{}
			g.Expect(mgr.deps.Client.Get(ctx, firstKey, wt)).To(Succeed())
			g.Expect(wt.Status.Phase).To(Equal(agentsv1alpha1.WorktreeReady))
			pod := &corev1.Pod{}
			g.Expect(mgr.deps.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: first.podName()}, pod)).To(Succeed())
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
			_, ok := mgr.deps.Reports.Get(firstKey)
			g.Expect(ok).To(BeTrue())
		}).Should(Succeed())
		// Ready in the queue: the newer sessions not yet taken, and the first session.
		Eventually(func() float64 { return queueReady() - base }).Should(BeNumerically(">=", newer), "the first session is queued with its news")
		Expect(sessionPhase(w.ns, first.name)()).NotTo(Equal(agentsv1alpha1.PhaseWorking), "not Working while the worker is held")

		By("the worker is let go")
		open2()
		first.expect(agentsv1alpha1.PhaseWorking)
		Eventually(func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(phaseOfFirst)
		}).Should(Equal(newer), "every newer session had its first reconcile")
		mu.Lock()
		defer mu.Unlock()
		var ahead []string
		for name, phase := range phaseOfFirst {
			if name != secondHolder && phase != agentsv1alpha1.PhaseWorking {
				ahead = append(ahead, name)
			}
		}
		sort.Strings(ahead)
		Expect(ahead).To(BeEmpty(), "these newer sessions had their first reconcile before the first session's report was (the holder was %s)", secondHolder)
	})
})
