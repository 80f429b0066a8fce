// Command evidence checks, shows, compares and makes evidence archives.
//
//	evidence verify ARCHIVE        recheck every hash, the manifest schema and the results
//	evidence show ARCHIVE          print the manifest headline and the summary tables
//	evidence diff A B              compare two runs (source, files, verdicts, responses)
//	evidence pack --kind K --attach FILE... [--out DIR] [--command "ARGV"] [--exit-status N]
//	                               wrap reports of another tool (e.g. the boundary checker) as evidence
//
// ARCHIVE is an evidence-*.tar.gz or an unpacked evidence folder.
// Exit status: 0 success, 1 verification failed or runs differ, 2 usage error.
package main

import (
	"os"

	"github.com/audioproof/audioproof/evidence/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
