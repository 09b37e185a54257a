package controller_test

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/controller"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// Two replicas under leader election, as config/manager runs them with replicas: 2. The test
// plays the Service: it spreads calls over the ready replicas, and stops sending to one as soon
// as it starts terminating (the endpoint removed during the pod's preStop pause, before the
// process stops).
var _ = Describe("Two replicas under leader election", Serial, func() {
	It("lose no runner call and no webhook delivery when the leader stops in the middle of a stream", func() {
		w := newWorld()
		admin := mgr
		admin.stop()
		a := &managerUnderTest{runnerAddr: admin.runnerAddr, webhookAddr: admin.webhookAddr, leaseNamespace: w.ns, name: "replica-a"}
		b := &managerUnderTest{runnerAddr: freeAddr(), webhookAddr: freeAddr(), leaseNamespace: w.ns, name: "replica-b"}
		a.start()
		Eventually(a.elected).Should(BeClosed())
		b.start()
		mgr = a
		stopped := false
		DeferCleanup(func() {
			b.stop()
			if !stopped {
				a.stop()
			}
			mgr = admin
			mgr.start()
		})

		By("the Lease names the leader's address, which the standby reads")
		lease := &coordinationv1.Lease{}
		Expect(k8sClient.Get(ctx, objKey(w.ns, "shepherd-test"), lease)).To(Succeed())
		Expect(lease.Labels).To(HaveKeyWithValue(controller.LabelLeaderAddress, "127.0.0.1"))
		Expect(lease.Labels).To(HaveKeyWithValue(controller.LabelLeaderRunnerPort, fmt.Sprint(portOf(a.runnerAddr))))
		Expect(lease.Labels).To(HaveKeyWithValue(controller.LabelLeaderWebhookPort, fmt.Sprint(portOf(a.webhookAddr))))
		Consistently(b.elected, "500ms").ShouldNot(BeClosed())

		create(w.project().Obj())
		Eventually(projectConditions(w.ns, "widgets")).Should(HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue))
		ag := w.agent("ha")
		create(MakeSession(ag.name, w.ns, "widgets").Prompt("Fix the flaky test").Obj())
		ag.start()
		ag.report(agentsv1alpha1.ActivityActive)
		ag.expect(agentsv1alpha1.PhaseWorking)
		viaB, err := connectRunnerAt(b.runnerAddr, ag.pod(), "widgets")
		Expect(err).NotTo(HaveOccurred(), "the standby serves the runner channel (forwarding to the leader)")
		runners := map[string]*runnerapi.Client{a.runnerAddr: ag.runner.Client, b.runnerAddr: viaB.Client}

		By("a stream of runner reports and signed deliveries over both replicas; the leader stops in the middle")
		accepted := func() float64 {
			v, _ := sample(gather(), "shepherd_scm_webhook_deliveries_total", map[string]string{"event": "pull_request", "outcome": "accepted"})
			return v
		}
		before := accepted()
		path := "/hooks/" + w.ns + "/widgets"
		body := []byte(`{"action":"synchronize","number":1,"repository":{"full_name":"` + w.full + `"}}`)
		const calls = 40
		var mu sync.Mutex
		live := []string{"a", "b"}
		addr := map[string][2]string{"a": {a.runnerAddr, a.webhookAddr}, "b": {b.runnerAddr, b.webhookAddr}}
		pick := func(i int) [2]string {
			mu.Lock()
			defer mu.Unlock()
			return addr[live[i%len(live)]]
		}
		var failures []string
		seq := ag.runner.seq
		var last string
		var wg sync.WaitGroup
		wg.Go(func() {
			defer GinkgoRecover()
			for i := range calls {
				to := pick(i)
				seq++
				last = fmt.Sprintf("report %d", i)
				rep := runnerapi.Report{Sequence: seq, Time: time.Now(), Summary: last,
					Activity: &runnerapi.ActivityReport{State: agentsv1alpha1.ActivityActive, LastActivityTime: time.Now()}}
				if err := runners[to[0]].Report(ctx, rep); err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s to %s: %v", last, to[0], err))
					mu.Unlock()
				}
				code, err := postTo(to[1], path, "pull_request", body, webhookSecret)
				if err != nil || code != http.StatusAccepted {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("delivery %d to %s: %d %v", i, to[1], code, err))
					mu.Unlock()
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
		time.Sleep(700 * time.Millisecond)
		mu.Lock()
		live = []string{"b"} // the endpoint goes first, then the process
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		a.stop()
		stopped = true
		wg.Wait()

		Expect(failures).To(BeEmpty(), "every call answered")
		Expect(b.elected).To(BeClosed(), "the standby took over")
		Expect(accepted()-before).To(Equal(float64(calls)), "every delivery reached a leader's receiver once")
		mgr = b
		Eventually(sessionStatus(w.ns, ag.name)).Should(HaveField("Summary", last), "the last report reached the new leader")
	})
})
