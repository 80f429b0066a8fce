// Package cli is the checkpoints command, as a package so that tests and
// testscript run it in process.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/audioproof/audioproof/checkpoints/harness"
	"github.com/audioproof/audioproof/checkpoints/plan"
)

const usage = `usage:
  checkpoints run [--plan default|FILE] [--base REF] [--out DIR] [--backends LIST]
                  [--repo DIR] [--ready-timeout DURATION]
      Build every variant, start each fresh per backend, drive the plan's steps,
      compare with the reference variant and write evidence-<date>-<commit>.tar.gz
      under --out (default out/parity). Exit 0: every required check passed;
      1: a check failed; 2: bad plan or arguments.
  checkpoints plan print [NAME]   print a built-in plan (default: default)
  checkpoints plan check FILE     validate a plan file (exit 2 when bad)
`

// Main runs the command and returns its exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return run(args[1:], stdout, stderr)
	case "plan":
		return planCmd(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "checkpoints: unknown command %q\n%s", args[0], usage)
	return 2
}

func planCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "print":
		name := "default"
		if len(args) > 1 {
			name = args[1]
		}
		data, ok := plan.Builtin(name)
		if !ok {
			fmt.Fprintf(stderr, "checkpoints: no built-in plan %q (have: %s)\n", name, strings.Join(plan.BuiltinNames(), ", "))
			return 2
		}
		_, _ = stdout.Write(data)
		return 0
	case "check":
		if len(args) != 2 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		wd, _ := os.Getwd()
		p, err := plan.Load(args[1], wd)
		if err != nil {
			fmt.Fprintf(stderr, "checkpoints: %v\n", err)
			return 2
		}
		fmt.Fprintf(stdout, "plan %s (version %d): %d variants, %d models, steps %s\n", p.Name, p.Version, len(p.Variants), len(p.Models), strings.Join(p.StepNames(), ","))
		return 0
	}
	fmt.Fprintf(stderr, "checkpoints plan: unknown subcommand %q\n%s", args[0], usage)
	return 2
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("checkpoints run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	planName := fs.String("plan", "default", "built-in plan name or plan file")
	base := fs.String("base", "", "git ref the ref-built variants use (default: the plan's base, origin/main for the default plan)")
	out := fs.String("out", "out/parity", "folder for binaries, the evidence folder and the archive")
	backends := fs.String("backends", "", "comma-separated backends to run instead of the plan's (cpu,vulkan,cuda,auto)")
	repo := fs.String("repo", ".", "repository root (worktree builds; the servers' working folder)")
	ready := fs.Duration("ready-timeout", 0, "override the plan's time to wait for a server to become ready")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "checkpoints run: unexpected arguments %v\n", fs.Args())
		return 2
	}
	repoAbs, err := filepath.Abs(*repo)
	if err != nil {
		fmt.Fprintf(stderr, "checkpoints: %v\n", err)
		return 2
	}
	p, err := plan.Load(*planName, repoAbs)
	if err != nil {
		fmt.Fprintf(stderr, "checkpoints: %v\n", err)
		return 2
	}
	if *ready > 0 {
		p.Server.ReadyTimeoutMs = int(ready.Milliseconds())
	}
	var bl []string
	if *backends != "" {
		for _, b := range strings.Split(*backends, ",") {
			b = strings.TrimSpace(b)
			switch b {
			case "cpu", "vulkan", "cuda", plan.BackendAuto:
				bl = append(bl, b)
			default:
				fmt.Fprintf(stderr, "checkpoints: unknown backend %q in --backends (use cpu, vulkan, cuda, auto)\n", b)
				return 2
			}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	terminal := false
	if f, ok := stderr.(*os.File); ok {
		terminal = term.IsTerminal(int(f.Fd()))
	}
	start := time.Now()
	res, err := harness.Run(ctx, harness.Options{Plan: p, RepoDir: repoAbs, Base: *base, OutDir: *out, Backends: bl,
		Progress: stderr, Terminal: terminal})
	if err != nil {
		fmt.Fprintf(stderr, "checkpoints: %v\n", err)
		if errors.Is(err, plan.ErrBadPlan) {
			return 2
		}
		return 1
	}
	r := res.Results
	fmt.Fprintf(stdout, "\n%s\n", r.Headline())
	for _, n := range r.Notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	fails := r.Failures()
	if len(fails) > 0 {
		fmt.Fprintf(stdout, "failures (%d):\n", len(fails))
		for i, c := range fails {
			if i == 10 {
				fmt.Fprintf(stdout, "  ... and %d more (see summary.md)\n", len(fails)-10)
				break
			}
			req := ""
			if !c.Required {
				req = " (optional)"
			}
			fmt.Fprintf(stdout, "  - %s%s: %s\n", c.Name(), req, oneLine(c.Message))
		}
	}
	fmt.Fprintf(stdout, "evidence: %s\narchive: %s\n(%s; check it with: go run ./evidence verify %s)\n",
		res.Folder, res.Archive, time.Since(start).Round(time.Second), res.Archive)
	if err := os.WriteFile(filepath.Join(filepath.Dir(res.Archive), "LATEST"), []byte(filepath.Base(res.Archive)+"\n"), 0o644); err != nil {
		fmt.Fprintf(stderr, "checkpoints: %v\n", err)
	}
	if !r.Passed {
		return 1
	}
	return 0
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 240 {
		s = s[:240] + "..."
	}
	return s
}
