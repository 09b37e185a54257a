package controller_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/kubectlplugin"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// kubectl shepherd against the running controllers: what the plugin writes is what the manager
// delivers, once (internal/kubectlplugin tests each command's output and RBAC on its own).
var _ = Describe("kubectl shepherd", func() {
	var kubeconfig string
	BeforeEach(func() {
		user, err := testEnv.AddUser(envtest.User{Name: "lead", Groups: []string{"system:masters"}}, nil)
		Expect(err).NotTo(HaveOccurred())
		kc, err := user.KubeConfig()
		Expect(err).NotTo(HaveOccurred())
		kubeconfig = filepath.Join(GinkgoT().TempDir(), "kubeconfig")
		Expect(os.WriteFile(kubeconfig, kc, 0o600)).To(Succeed())
	})
	plugin := func(args ...string) string {
		GinkgoHelper()
		var out, errOut bytes.Buffer
		cmd := kubectlplugin.NewCommand(genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
		cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
		Expect(cmd.ExecuteContext(context.Background())).To(Succeed(), errOut.String())
		return out.String()
	}

	It("send and answer reach the agent once each, a retry of the same id adds nothing", func() {
		w := newWorld()
		create(w.project().Obj())
		a := w.agent("plugin-steer")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Tidy the README").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)

		Expect(plugin("send", "-n", w.ns, a.name, "Also update the changelog.", "--id", "changelog")).To(Equal("message changelog queued for plugin-steer\n"))
		Eventually(a.pending).Should(HaveExactElements(And(HaveField("ID", "changelog"), HaveField("Text", "Also update the changelog."))))
		Expect(a.runner.Ack(ctx, "changelog")).To(Succeed())
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Messages.Delivered", ConsistOf("changelog")))

		By("a retry of the same send is the same message: nothing is delivered again")
		plugin("send", "-n", w.ns, a.name, "Also update the changelog.", "--id", "changelog")
		Consistently(a.pending).WithTimeout(time.Second).Should(BeEmpty())

		By("the agent asks; the answer is delivered once, after the first message")
		a.report(agentsv1alpha1.ActivityWaitingForInput, question("YAML or TOML?"))
		a.expect(agentsv1alpha1.PhaseNeedsInput)
		Expect(plugin("answer", "-n", w.ns, a.name, "YAML, please.", "--id", "format")).To(Equal("question: YAML or TOML?\nanswer format queued for plugin-steer\n"))
		Eventually(a.pending).Should(HaveExactElements(And(HaveField("ID", "format"), HaveField("Text", "YAML, please."))))
		Expect(a.runner.Ack(ctx, "format")).To(Succeed())
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Messages.Delivered", HaveExactElements("changelog", "format")))
		var s agentsv1alpha1.AgentSession
		Expect(k8sClient.Get(ctx, objKey(w.ns, a.name), &s)).To(Succeed())
		Expect(s.Spec.Messages).To(HaveExactElements(
			And(HaveField("ID", "changelog"), HaveField("From", "lead")), And(HaveField("ID", "format"), HaveField("From", "lead"))))
	})
})
