package kubectlplugin

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultDashboardPort is where `kubectl shepherd dashboard` listens; notifications' deep links
// assume it unless the manager is told another URL.
const DefaultDashboardPort = 8001

// DashboardProxy forwards the browser's requests for Shepherd's aggregated API (the dashboard
// and the transcript stream) to the API server with the user's own credentials, as kubectl
// proxy does, but for that one API group only and only from this machine's loopback: a page of
// another site cannot use it (its Host is refused, which stops DNS rebinding; the dashboard's
// forms carry a token only its own pages hold).
type DashboardProxy struct {
	// Config is the user's connection to the API server.
	Config *rest.Config
	// Addr is host:port the browser uses (127.0.0.1:8001).
	Addr string
}

// Handler is the proxy.
func (p *DashboardProxy) Handler() (http.Handler, error) {
	target, err := url.Parse(p.Config.Host)
	if err != nil || target.Host == "" {
		return nil, fmt.Errorf("the kubeconfig's server %q is not a URL", p.Config.Host)
	}
	if target.Scheme == "" {
		target.Scheme = "https"
	}
	tr, err := rest.TransportFor(p.Config)
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(p.Addr)
	hosts := map[string]bool{"127.0.0.1:" + port: true, "localhost:" + port: true, "[::1]:" + port: true}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
			// The browser's cookies and credentials are not the API server's business; the
			// transport adds the user's.
			r.Out.Header.Del("Cookie")
			r.Out.Header.Del("Authorization")
		},
		Transport:      tr,
		FlushInterval:  -1, // the transcript streams
		ModifyResponse: unrewriteLinks,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !hosts[r.Host]:
			http.Error(w, "this proxy answers only to "+p.Addr, http.StatusForbidden)
		case r.URL.Path == "/" || r.URL.Path == "":
			http.Redirect(w, r, UIPrefix+"/dashboard", http.StatusFound)
		case !strings.HasPrefix(r.URL.Path, UIPrefix+"/"):
			http.Error(w, "only Shepherd's dashboard is served here", http.StatusNotFound)
		default:
			rp.ServeHTTP(w, r)
		}
	}), nil
}

// maxPage bounds a dashboard page the proxy reads to mend its links.
const maxPage = 16 << 20

// absoluteUI is a link the API server's proxy made absolute: its own address before one of the
// UI group's paths.
var absoluteUI = regexp.MustCompile(`https?://[^/"'\s<>]+(` + regexp.QuoteMeta(UIPrefix) + `/)`)

// unrewriteLinks undoes what the API server's proxy does to an HTML page from an aggregated
// API: it makes every link absolute, at the API server's address as it knows it (where the
// browser has no credentials). The proxy turns them back into paths on itself.
func unrewriteLinks(resp *http.Response) error {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		return nil
	}
	var r io.Reader = resp.Body
	switch resp.Header.Get("Content-Encoding") {
	case "":
	case "gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return err
		}
		r = zr
		resp.Header.Del("Content-Encoding")
	default:
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(r, maxPage+1))
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	if len(body) > maxPage {
		return fmt.Errorf("a dashboard page over %d bytes", maxPage)
	}
	body = absoluteUI.ReplaceAll(body, []byte("$1"))
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

func newDashboard(o *Options) *cobra.Command {
	var port int
	cmd := &cobra.Command{
		Use:   "dashboard [NAME]",
		Short: "Open Shepherd's dashboard in your browser, with your own Kubernetes credentials",
		Long: `dashboard serves Shepherd's web dashboard on this machine's loopback (http://127.0.0.1:8001), forwarding
to the API server with your kubeconfig's credentials: you see and steer what Kubernetes RBAC lets
you. With NAME it prints the session's page (of -n NAMESPACE). It runs until interrupted.`,
		Example: `  kubectl shepherd dashboard
  kubectl shepherd dashboard -n team-a widgets-42`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.Loading, o.Overrides)
			cfg, err := loader.ClientConfig()
			if err != nil {
				return err
			}
			cfg.UserAgent = FieldManager
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen on %s (another dashboard or kubectl proxy? pass --port): %w", addr, err)
			}
			addr = l.Addr().String()
			p := &DashboardProxy{Config: cfg, Addr: addr}
			h, err := p.Handler()
			if err != nil {
				return err
			}
			page := "http://" + addr + UIPrefix + "/dashboard"
			if len(args) == 1 {
				ns, _, err := loader.Namespace()
				if err != nil {
					return err
				}
				page = "http://" + addr + UIPrefix + "/namespaces/" + url.PathEscape(ns) + "/agentsessions/" + url.PathEscape(args[0]) + "/dashboard"
			}
			fmt.Fprintf(o.Streams.Out, "Shepherd's dashboard: %s\n(Ctrl-C stops it)\n", page)
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
			go func() {
				<-cmd.Context().Done()
				sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&port, "port", DefaultDashboardPort, "Port on 127.0.0.1 to serve the dashboard at (0 picks one).")
	return cmd
}
