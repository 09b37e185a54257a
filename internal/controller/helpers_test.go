package controller_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/workspace"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

var ctx = context.Background()

// project makes a Project on the fake GitHub repository full.
func project(ns, full string) *ProjectBuilder {
	return MakeProject("widgets", ns).URL(gh.CloneURL(full)).TokenSecret("github", "token").With(func(s *agentsv1alpha1.ProjectSpec) {
		s.SCM.APIURL = agentsv1alpha1.HTTPURL(gh.URL())
		s.SCM.WebhookSecretRef = &agentsv1alpha1.SecretKeyRef{Name: "github", Key: "webhook"}
		s.Tracker = &agentsv1alpha1.TrackerSpec{Provider: agentsv1alpha1.TrackerGitHub, BranchPrefix: "shepherd/"}
	})
}

func sessionPhase(ns, name string) func() agentsv1alpha1.SessionPhase {
	return func() agentsv1alpha1.SessionPhase {
		s := &agentsv1alpha1.AgentSession{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
			return ""
		}
		return s.Status.Phase
	}
}

// playKubelet marks a pod as the kubelet would: the runner sidecar running, the checkout step ended (prepare leaves its
// result as the termination message, as the runner writes it), the agent container running.
func playKubelet(pod *corev1.Pod, prepared *workspace.Result, running bool) {
	GinkgoHelper()
	Eventually(func() error {
		p := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), p); err != nil {
			return err
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		initStatuses(p, now)
		p.Status.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			st := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: running}
			switch {
			case c.Name == "prepare":
				// The checkout step, beside the agent's container, ended with its result.
				msg := ""
				if prepared != nil {
					b, _ := json.Marshal(prepared)
					msg = string(b)
				}
				st.Ready = false
				st.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: msg, FinishedAt: now}
			case running:
				st.State.Running = &corev1.ContainerStateRunning{StartedAt: now}
			default:
				st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
			}
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, st)
		}
		return k8sClient.Status().Update(ctx, p)
	}).Should(Succeed())
}

// finishPod ends a pod's main container with code and message (a worktree pod's result).
func finishPod(pod *corev1.Pod, code int32, message string) {
	GinkgoHelper()
	Eventually(func() error {
		p := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), p); err != nil {
			return err
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodSucceeded
		if code != 0 {
			p.Status.Phase = corev1.PodFailed
		}
		p.Status.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: message, FinishedAt: now}},
			})
		}
		return k8sClient.Status().Update(ctx, p)
	}).Should(Succeed())
}

func prepared(branch string) *workspace.Result {
	return &workspace.Result{
		Path: "/shepherd/workspace/worktrees/x", Branch: branch, BranchAction: workspace.BranchCreated,
		Setup: workspace.SetupResult{State: agentsv1alpha1.SetupSucceeded},
		Facts: workspace.Facts{Branch: branch, Head: "0123456789abcdef0123456789abcdef01234567"},
	}
}

func waitPod(ns, name string) *corev1.Pod {
	GinkgoHelper()
	pod := &corev1.Pod{}
	Eventually(func() error { return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pod) }).
		WithTimeout(20 * time.Second).Should(Succeed())
	return pod
}

// fakeRunner plays the runner over the real channel, with a real token bound to its pod.
type fakeRunner struct {
	*runnerapi.Client
	pod  *corev1.Pod
	seq  uint64
	task *runnerapi.Task
}

func startRunner(ns, session, projectName string) *fakeRunner {
	GinkgoHelper()
	pod := waitPod(ns, session+"-agent")
	playKubelet(pod, prepared("shepherd/"+session), true)
	return connectRunner(pod, projectName)
}

func connectRunner(pod *corev1.Pod, projectName string) *fakeRunner {
	GinkgoHelper()
	r, err := connectRunnerE(pod, projectName)
	Expect(err).NotTo(HaveOccurred())
	return r
}

// connectRunnerE makes a token bound to pod, as the kubelet projects it, and fetches the task.
func connectRunnerE(pod *corev1.Pod, projectName string) (*fakeRunner, error) {
	return connectRunnerAt(mgr.runnerAddr, pod, projectName)
}

// connectRunnerAt is connectRunnerE through the runner channel at addr (one replica's).
func connectRunnerAt(addr string, pod *corev1.Pod, projectName string) (*fakeRunner, error) {
	tr, err := clientset.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, projectName+"-agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{runnerapi.Audience}, ExpirationSeconds: ptr.To[int64](600),
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	f := filepath.Join(GinkgoT().TempDir(), "token")
	if err := os.WriteFile(f, []byte(tr.Status.Token), 0o600); err != nil {
		return nil, err
	}
	c, err := runnerapi.NewClient("http://"+addr, f, "")
	if err != nil {
		return nil, err
	}
	r := &fakeRunner{Client: c, pod: pod}
	task, err := c.Task(ctx)
	if err != nil {
		return nil, err
	}
	r.seq = task.LastSequence
	r.task = task
	return r, nil
}

func (r *fakeRunner) report(state agentsv1alpha1.ActivityState, mutate ...func(*runnerapi.Report)) {
	GinkgoHelper()
	r.seq++
	rep := runnerapi.Report{Sequence: r.seq, Time: time.Now(), Activity: &runnerapi.ActivityReport{State: state, LastActivityTime: time.Now()}}
	for _, m := range mutate {
		m(&rep)
	}
	Expect(r.Report(ctx, rep)).To(Succeed())
}
