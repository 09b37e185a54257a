package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/scm/webhook"
)

// forgeHooks stands for the repository webhooks the suite's Projects registered on the fake
// GitHub, which has a single webhook URL: it forwards each delivery, headers and body unchanged,
// to the path of every Project (with a webhook secret) of the delivery's repository, as the forge
// would send it to each of their hooks.
type forgeHooks struct {
	receiver string
}

func (f *forgeHooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var p struct {
		Repository struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
	}
	_ = json.Unmarshal(body, &p)
	repo, err := scm.ParseRepo(p.Repository.FullName)
	if err != nil {
		w.WriteHeader(http.StatusOK)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var projects agentsv1alpha1.ProjectList
	if err := k8sClient.List(ctx, &projects); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	status := http.StatusOK
	for i := range projects.Items {
		pr := &projects.Items[i]
		own, err := scm.ParseRepoURL(string(pr.Spec.Repository.URL))
		if err != nil || pr.Spec.SCM.WebhookSecretRef == nil || !own.Equal(repo) {
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost,
			f.receiver+webhook.ProjectPath(types.NamespacedName{Namespace: pr.Namespace, Name: pr.Name}), bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			status = http.StatusBadGateway
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode >= 300 || status == http.StatusOK {
			status = resp.StatusCode
		}
	}
	w.WriteHeader(status)
}
