// Command boundaries proves that a change kept its promise not to touch
// protected (upstream) code: it compares the protected paths of a repository's
// working tree with a base revision and allows only the edits its policy
// writes down. It uses go-git; no git binary is needed.
//
// Usage:
//
//	go run ./boundaries --base REF [--merge-base] [--repo DIR] [--config FILE | --preset NAME]
//	    [--format text|json|junit] [--output FILE]
//
// Exit status: 0 when the boundary holds, 1 when it is broken, 2 for usage,
// policy or repository errors (unknown ref, not a repository, bad config).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/audioproof/audioproof/boundaries/check"
	"github.com/audioproof/audioproof/boundaries/policy"
	"github.com/audioproof/audioproof/boundaries/report"
)

// Exit statuses.
const (
	exitOK     = 0
	exitBroken = 1
	exitUsage  = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("boundaries", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("base", "", "base revision to compare with: branch, remote branch, tag, hash, HEAD~2 (required)")
	mergeBase := fs.Bool("merge-base", false, "compare with the merge base of REF and HEAD (the fork point) instead of REF")
	repoDir := fs.String("repo", ".", "folder inside the repository's working tree")
	configFile := fs.String("config", "", "policy file (default: boundaries.json at the repository root)")
	preset := fs.String("preset", "", "built-in policy instead of a file: "+strings.Join(policy.Presets(), ", "))
	format := fs.String("format", "text", "report format: "+strings.Join(report.Formats, ", "))
	output := fs.String("output", "", "write the report to FILE (a text summary still goes to standard output)")
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: boundaries --base REF [--merge-base] [--repo DIR] [--config FILE | --preset NAME] [--format text|json|junit] [--output FILE]\n\n"+
			"Checks that the protected paths of the working tree (committed, staged, unstaged and untracked files)\n"+
			"match REF, except for the edits the policy allows. Exit 0: boundary holds; 1: broken; 2: usage or repository error.\n\n")
		fs.PrintDefaults()
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "boundaries: "+format+"\n", a...)
		fmt.Fprintln(stderr, "run boundaries -h for help")
		return exitUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *version {
		fmt.Fprintln(stdout, "boundaries", report.Version)
		return exitOK
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q; every option is a flag (--base REF)", fs.Arg(0))
	}
	if *base == "" {
		return usage("--base is required: the revision the protected paths must match, e.g. --base origin/main")
	}
	if *configFile != "" && *preset != "" {
		return usage("give --config or --preset, not both")
	}
	switch *format {
	case "text", "json", "junit":
	default:
		return usage("unknown --format %q; use text, json or junit", *format)
	}

	var pol *policy.Policy
	var err error
	policyFile := ""
	switch {
	case *preset != "":
		pol, err = policy.Preset(*preset)
	default:
		policyFile = *configFile
		if policyFile == "" {
			root, rerr := worktreeRoot(*repoDir)
			if rerr != nil {
				fmt.Fprintln(stderr, rerr)
				return exitUsage
			}
			policyFile = filepath.Join(root, policy.DefaultFile)
		}
		pol, err = policy.Load(policyFile)
	}
	if err != nil {
		fmt.Fprintf(stderr, "boundaries: %v\n", err)
		return exitUsage
	}

	now := time.Now()
	res, err := check.Run(check.Options{Dir: *repoDir, Base: *base, MergeBase: *mergeBase, Policy: pol, PolicyFile: policyFile})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	in := report.Input{Result: res, Policy: pol, Now: now}
	if *output != "" {
		if err := writeFile(*output, *format, in); err != nil {
			fmt.Fprintf(stderr, "boundaries: write %s: %v\n", *output, err)
			return exitUsage
		}
		if err := report.Text(stdout, in); err != nil {
			return exitUsage
		}
		fmt.Fprintf(stdout, "%s report written to %s\n", *format, *output)
	} else if err := report.Write(stdout, *format, in); err != nil {
		fmt.Fprintf(stderr, "boundaries: %v\n", err)
		return exitUsage
	}
	if !res.OK() {
		return exitBroken
	}
	return exitOK
}

// worktreeRoot finds the working tree root above dir, for the default policy.
func worktreeRoot(dir string) (string, error) {
	_, root, err := check.Open(dir)
	return root, err
}

func writeFile(name, format string, in report.Input) error {
	if dir := filepath.Dir(name); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := report.Write(f, format, in); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
