// Command chartgen writes the generated part of charts/shepherd from config/ (`make chart`), or
// with --check lists how the committed chart differs and fails.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/shepherd-dev/shepherd/hack/release"
)

func main() {
	kubectl := flag.String("kubectl", "kubectl", "kubectl whose kustomize renders config/.")
	repo := flag.String("repo", ".", "The repository's root.")
	check := flag.Bool("check", false, "Fail when the committed chart differs instead of writing it.")
	flag.Parse()
	ctx := context.Background()
	if !*check {
		if err := release.WriteChart(ctx, *kubectl, *repo); err != nil {
			fmt.Fprintln(os.Stderr, "chartgen:", err)
			os.Exit(1)
		}
		return
	}
	diff, err := release.ChartDiff(ctx, *kubectl, *repo)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
	for _, d := range diff {
		fmt.Fprintln(os.Stderr, "chartgen:", release.ChartDir+"/"+d, "(run make chart)")
	}
	if len(diff) > 0 {
		os.Exit(1)
	}
}
