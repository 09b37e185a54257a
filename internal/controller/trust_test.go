package controller_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/controller"
	"github.com/shepherd-dev/shepherd/internal/egress"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/runnertls"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// runnerSide are the containers of the runner's trust domain in an agent pod.
var runnerSide = map[string]bool{"runner": true}

var _ = Describe("Two trust domains in the agent pod", func() {
	It("keeps the token, the channel and the model key in the runner's container, and the agent's containers to their own directories", func() {
		w := newWorld()
		create(&corev1.Secret{ObjectMeta: objMeta(w.ns, "llm"), StringData: map[string]string{"key": "sk-real-model-key"}})
		create(w.project().With(func(s *agentsv1alpha1.ProjectSpec) {
			s.Agent.ModelAPI = &agentsv1alpha1.ModelAPISpec{API: agentsv1alpha1.ModelAPIAnthropic, URL: "https://llm.example.com",
				KeySecretRef: &agentsv1alpha1.SecretKeyRef{Name: "llm", Key: "key"}}
			s.Agent.Env = []agentsv1alpha1.EnvVar{{Name: "LANG", Value: "C.UTF-8"}}
		}).Obj())
		a := w.agent("two-domains")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Split the work").Obj())
		pod := a.pod() // as stored by the API server, defaults applied

		Expect(pod.Spec.AutomountServiceAccountToken).To(HaveValue(BeFalse()))
		Expect(pod.Spec.ShareProcessNamespace).To(Or(BeNil(), HaveValue(BeFalse())))
		all := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
		Expect(all).To(HaveLen(3), "the runner sidecar, prepare, the agent")
		for _, c := range all {
			sc := c.SecurityContext
			Expect(sc.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()), c.Name)
			Expect(sc.AllowPrivilegeEscalation).To(HaveValue(BeFalse()), c.Name)
			Expect(sc.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")), c.Name)
			Expect(c.Resources.Limits).To(HaveKey(corev1.ResourceMemory), c.Name)
			mounts := map[string]corev1.VolumeMount{}
			for _, m := range c.VolumeMounts {
				mounts[m.MountPath] = m
			}
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			if runnerSide[c.Name] {
				Expect(sc.RunAsUser).To(HaveValue(Equal(int64(65533))), c.Name)
				continue
			}
			By("the agent's container " + c.Name)
			Expect(sc.RunAsUser).To(HaveValue(Equal(int64(65532))))
			Expect(mounts).NotTo(HaveKey("/var/run/secrets/shepherd"), "no runner token")
			Expect(mounts).NotTo(HaveKey("/var/run/secrets/shepherd-model"), "no model key")
			Expect(mounts).NotTo(HaveKey("/shepherd/workspace"), "not the whole volume")
			Expect(mounts["/shepherd/workspace/worktrees/"+a.name]).To(HaveField("SubPath", "worktrees/"+a.name))
			Expect(mounts["/shepherd/workspace/homes/"+a.name]).To(HaveField("SubPath", "homes/"+a.name))
			Expect(mounts["/shepherd/workspace/mirror.git"]).To(And(HaveField("SubPath", "mirror.git"), HaveField("ReadOnly", true)))
			for name := range env {
				Expect(name).NotTo(HavePrefix("SHEPHERD_"))
			}
			for _, e := range c.Env {
				Expect(e.ValueFrom).To(BeNil(), "no Secret reaches the agent's environment here")
			}
		}
		runner := pod.Spec.InitContainers[0]
		Expect(runner.Name).To(Equal("runner"))
		Expect(runner.RestartPolicy).To(HaveValue(Equal(corev1.ContainerRestartPolicyAlways)))
		Expect(runner.Args).To(ContainElements("--model-api=Anthropic", "--model-url=https://llm.example.com", "--model-key-file=/var/run/secrets/shepherd-model/key"))
		Expect(pod.Spec.Volumes).To(ContainElement(And(HaveField("Name", "model-key"), HaveField("Secret.SecretName", "llm"))))
		for _, v := range pod.Spec.Volumes {
			if v.EmptyDir != nil {
				Expect(v.EmptyDir.SizeLimit).NotTo(BeNil(), v.Name)
			}
		}
		Expect(strings.Contains(pod.String(), "sk-real-model-key")).To(BeFalse(), "the key's value is nowhere in the pod")
	})
})

var _ = Describe("The egress proxy's resolver", func() {
	It("knows an agent pod by its address, gives it its Project's hosts, and the model API's host to its runner alone", func() {
		w := newWorld()
		create(w.project().With(func(s *agentsv1alpha1.ProjectSpec) {
			s.Network = &agentsv1alpha1.NetworkSpec{Egress: &agentsv1alpha1.EgressSpec{Hosts: []string{"registry.npmjs.org", "*.pkg.example.org"}}}
			s.Agent.ModelAPI = &agentsv1alpha1.ModelAPISpec{API: agentsv1alpha1.ModelAPIAnthropic}
		}).Obj())
		a := w.agent("egress")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Fetch a package").Obj())
		pod := a.pod()
		setPodStatus(pod, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.PodIP, p.Status.PodIPs = "10.244.7.9", []corev1.PodIP{{IP: "10.244.7.9"}}
		})
		r := &controller.EgressResolver{Reader: k8sClient,
			Auth: &runnerapi.Authenticator{Reviewer: runnerapi.NewTokenReviewer(k8sClient), Audience: runnerapi.Audience, TTL: time.Minute, Clock: clock.RealClock{}}}
		ip := netip.MustParseAddr("10.244.7.9")

		pol, err := r.PolicyFor(ctx, ip, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(pol.Identity).To(Equal(w.ns + "/" + a.podName()))
		Expect(pol.Hosts).To(ConsistOf("registry.npmjs.org", "*.pkg.example.org"), "the agent gets the Project's list, not the model API")

		token := func(p *corev1.Pod) string {
			tr, err := clientset.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, "widgets-agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
				Audiences: []string{runnerapi.Audience}, ExpirationSeconds: ptr.To[int64](600),
				BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			return tr.Status.Token
		}
		pol, err = r.PolicyFor(ctx, ip, "Bearer "+token(pod))
		Expect(err).NotTo(HaveOccurred())
		Expect(pol.Hosts).To(ContainElement("api.anthropic.com:443"), "the runner, with its token, reaches the model API")

		By("another pod's token is worth nothing at this address")
		b := w.agent("other")
		create(MakeSession(b.name, w.ns, "widgets").Prompt("Something else").Obj())
		_, err = r.PolicyFor(ctx, ip, "Bearer "+token(b.pod()))
		Expect(err).To(MatchError(egress.ErrProxyAuthRequired))
		_, err = r.PolicyFor(ctx, ip, "Basic dXNlcjpwYXNz")
		Expect(err).To(MatchError(egress.ErrProxyAuthRequired))

		By("an address no agent pod has is nobody")
		_, err = r.PolicyFor(ctx, netip.MustParseAddr("10.244.7.10"), "")
		Expect(err).To(MatchError(egress.ErrUnknownClient))

		By("a finished pod's address is nobody's")
		setPodStatus(pod, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })
		_, err = r.PolicyFor(ctx, ip, "")
		Expect(err).To(MatchError(egress.ErrUnknownClient))
	})
})

var _ = Describe("The runner channel over TLS", Serial, func() {
	It("makes its own CA, publishes it where agent pods mount it, and serves only to runners that verify it", func() {
		home := newNamespace()
		mgr.stop()
		tlsMgr := &managerUnderTest{runnerAddr: freeAddr(), webhookAddr: "0", tlsNamespace: home}
		tlsMgr.start()
		DeferCleanup(func() {
			tlsMgr.stop()
			mgr.start()
		})

		By("the CA and the serving certificate are kept in a Secret of the manager's namespace")
		sec := &corev1.Secret{}
		Eventually(func() error { return k8sClient.Get(ctx, objKey(home, controller.RunnerTLSSecret), sec) }).Should(Succeed())
		Expect(sec.Data).To(HaveKey("ca.key"))
		caPEM := sec.Data["ca.crt"]

		By("a Project's namespace gets the CA certificate, never its key")
		w := newWorld()
		create(w.project().Obj())
		cm := &corev1.ConfigMap{}
		Eventually(func() error { return k8sClient.Get(ctx, objKey(w.ns, controller.RunnerCAConfigMap), cm) }).Should(Succeed())
		Expect(cm.Data).To(Equal(map[string]string{"ca.crt": string(caPEM)}))

		By("its agent pods mount it beside the token, in the runner's container")
		a := w.agent("tls")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Over TLS").Obj())
		pod := a.pod()
		var token *corev1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == "runner-token" {
				token = &pod.Spec.Volumes[i]
			}
		}
		Expect(token).NotTo(BeNil())
		Expect(token.Projected.Sources).To(ContainElement(HaveField("ConfigMap.Name", controller.RunnerCAConfigMap)))
		Expect(pod.Spec.InitContainers[0].Env).To(ContainElement(corev1.EnvVar{Name: "SHEPHERD_CA_FILE", Value: "/var/run/secrets/shepherd/ca.crt"}))

		By("a runner that trusts the published CA is served; one that does not cannot even connect")
		tr, err := clientset.CoreV1().ServiceAccounts(w.ns).CreateToken(ctx, "widgets-agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
			Audiences: []string{runnerapi.Audience}, ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		dir := GinkgoT().TempDir()
		tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
		Expect(os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600)).To(Succeed())
		Expect(os.WriteFile(caFile, []byte(cm.Data["ca.crt"]), 0o644)).To(Succeed())
		c, err := runnerapi.NewClient("https://"+tlsMgr.runnerAddr, tokenFile, caFile)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error { _, err := c.Task(ctx); return err }).Should(Succeed())
		Expect(os.WriteFile(caFile, otherCA(), 0o644)).To(Succeed())
		Expect(os.Chtimes(caFile, time.Now().Add(time.Minute), time.Now().Add(time.Minute))).To(Succeed())
		c.HTTP.CloseIdleConnections()
		_, err = c.Task(ctx)
		Expect(err).To(MatchError(ContainSubstring("certificate signed by unknown authority")))

		By("a restart keeps the CA: running pods keep trusting the manager")
		tlsMgr.stop()
		tlsMgr.start()
		Consistently(func() []byte {
			_ = k8sClient.Get(ctx, objKey(home, controller.RunnerTLSSecret), sec)
			return sec.Data["ca.crt"]
		}).WithTimeout(2 * time.Second).Should(Equal(caPEM))
	})
})

// otherCA is a CA certificate that signed nothing of the manager's.
func otherCA() []byte {
	b, _, err := runnertls.Ensure(runnertls.Bundle{}, []string{"127.0.0.1"}, time.Now())
	Expect(err).NotTo(HaveOccurred())
	return b.CACert
}
