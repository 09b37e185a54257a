package scm_test

import (
	"strings"
	"testing"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// FuzzParseRepoURL: a repository URL from a Project either parses into an owner and a name that
// are path segments (no slash, not empty), or is refused; and the two compare as the forges do.
func FuzzParseRepoURL(f *testing.F) {
	for _, s := range []string{"https://github.com/acme/widgets.git", "git@github.com:acme/widgets.git", "ssh://git@host/acme/widgets",
		"http://192.0.2.2:3000/forge-admin/greeter.git", "https://ghe.example.com/prefix/Acme/Widgets", "https://host/", "acme/widgets",
		"https://host/a/b/../c", "https://user:pass@host/a/b?x=1#y", "git@host:", "https://host//b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := scm.ParseRepoURL(raw)
		if err != nil {
			return
		}
		if r.Owner == "" || r.Name == "" || strings.Contains(r.Owner, "/") || strings.Contains(r.Name, "/") {
			t.Fatalf("ParseRepoURL(%q) = %+v", raw, r)
		}
		up := scm.Repo{Owner: strings.ToUpper(r.Owner), Name: strings.ToUpper(r.Name)}
		if !r.Equal(up) || r.Key() != up.Key() {
			t.Fatalf("%+v and %+v differ in case only but do not compare equal", r, up)
		}
	})
}
