// Command checkpoints answers "does the candidate answer exactly as upstream
// did?": it runs a checkpoint plan against real server processes and writes
// an evidence archive.
//
//	go run ./checkpoints run --plan default --base origin/main --out out/parity
//
// See package checkpoints/plan for the plan format and checkpoints/harness
// for what a run does.
package main

import (
	"os"

	"github.com/audioproof/audioproof/checkpoints/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
