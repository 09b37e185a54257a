package controller_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/notify"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// receiver is a webhook endpoint that verifies Shepherd's signature and deduplicates on the
// delivery id, as the docs ask receivers to.
type receiver struct {
	*httptest.Server
	secret []byte
	status int

	mu        sync.Mutex
	posts     map[string]int                 // delivery id → POSTs received
	delivered map[string]notify.Notification // delivery id → the notification, once
	badSigs   int
}

func newReceiver(secret string, status int) *receiver {
	r := &receiver{secret: []byte(secret), status: status, posts: map[string]int{}, delivered: map[string]notify.Notification{}}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	DeferCleanup(r.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !notify.Verify(r.secret, body, req.Header.Get(notify.SignatureHeader)) {
		r.badSigs++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	id := req.Header.Get(notify.DeliveryHeader)
	r.posts[id]++
	if r.status != http.StatusOK {
		w.WriteHeader(r.status)
		return
	}
	var n notify.Notification
	if err := json.Unmarshal(body, &n); err == nil && n.ID == id && req.Header.Get(notify.EventHeader) == n.Type {
		if _, dup := r.delivered[id]; !dup {
			r.delivered[id] = n
		}
	}
	w.WriteHeader(http.StatusOK)
}

// types lists the delivered notifications' types, one per delivery id.
func (r *receiver) types() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range r.delivered {
		out = append(out, n.Type)
	}
	return out
}

func (r *receiver) counts() (posts map[string]int, badSigs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	posts = map[string]int{}
	for k, v := range r.posts {
		posts[k] = v
	}
	return posts, r.badSigs
}

// withWebhook routes urgent and action notifications to url, signed with the Secret "notify".
func withWebhook(w *world, url string) func(*agentsv1alpha1.ProjectSpec) {
	create(&corev1.Secret{ObjectMeta: objMeta(w.ns, "notify"), StringData: map[string]string{"hmac": "s3cret"}})
	return func(s *agentsv1alpha1.ProjectSpec) {
		s.Notifications = &agentsv1alpha1.NotificationsSpec{Routes: []agentsv1alpha1.NotificationRoute{{
			Name: "ops", Priorities: []agentsv1alpha1.Priority{agentsv1alpha1.PriorityUrgent, agentsv1alpha1.PriorityAction},
			Webhook: &agentsv1alpha1.WebhookTarget{URL: agentsv1alpha1.HTTPURL(url), SecretRef: agentsv1alpha1.SecretKeyRef{Name: "notify", Key: "hmac"}},
		}}}
	}
}

var _ = Describe("Notifications", func() {
	It("delivers signed notifications for urgent and action events once per id, and empties the outbox", func() {
		w := newWorld()
		rcv := newReceiver("s3cret", http.StatusOK)
		create(w.project().With(withWebhook(w, rcv.URL)).Obj())
		a := w.agent("notified")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Ask, then ship").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)

		a.report(agentsv1alpha1.ActivityWaitingForInput, question("May I drop Python 3.9?"))
		a.expect(agentsv1alpha1.PhaseNeedsInput)
		Eventually(rcv.types).Should(ConsistOf(string(agentsv1alpha1.EventSessionNeedsInput)))
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Notifications", BeEmpty()))

		a.report(agentsv1alpha1.ActivityActive)
		a.openPR() // no protection, no checks: mergeable at once; approvedAndGreen notifies
		a.report(agentsv1alpha1.ActivityReady)
		a.expect(agentsv1alpha1.PhaseMergeable)
		_, err := gh.Merge(w.full, a.pr, "squash")
		Expect(err).NotTo(HaveOccurred())
		a.expect(agentsv1alpha1.PhaseMerged)

		Eventually(rcv.types).Should(ConsistOf(
			string(agentsv1alpha1.EventSessionNeedsInput), string(agentsv1alpha1.EventMergeReady), string(agentsv1alpha1.EventPRMerged)))
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Notifications", BeEmpty()))
		posts, bad := rcv.counts()
		Expect(bad).To(BeZero(), "every notification is signed with the route's secret")
		Expect(posts).To(HaveLen(3))
		for id, n := range posts {
			Expect(n).To(Equal(1), "delivery %s was sent once", id)
		}
		Eventually(projectConditions(w.ns, "widgets")).Should(HaveCondition(agentsv1alpha1.ConditionNotificationsDelivering, metav1.ConditionTrue))
	})

	It("says NotificationsDelivering=False once a receiver that keeps failing is given up on", func() {
		w := newWorld()
		rcv := newReceiver("s3cret", http.StatusInternalServerError)
		create(w.project().With(withWebhook(w, rcv.URL)).Obj())
		a := w.agent("unheard")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Ask into the void").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityWaitingForInput, question("Anyone there?"))
		a.expect(agentsv1alpha1.PhaseNeedsInput)

		Eventually(projectConditions(w.ns, "widgets")).Should(HaveCondition(
			agentsv1alpha1.ConditionNotificationsDelivering, metav1.ConditionFalse, agentsv1alpha1.ReasonNotifierFailing))
		Expect(findCond(projectConditions(w.ns, "widgets")(), agentsv1alpha1.ConditionNotificationsDelivering).Message).
			To(And(ContainSubstring("route ops"), ContainSubstring("500")))
		posts, _ := rcv.counts()
		Expect(posts).To(HaveLen(1))
		for _, n := range posts {
			Expect(n).To(Equal(notify.DefaultPolicy.MaxAttempts), "retried up to the policy's bound, then given up")
		}
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Notifications", BeEmpty()), "a notification given up on leaves the outbox")
	})
})
