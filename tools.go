//go:build tools

// Package tools pins the modules that the project's packages use, so that
// helpers working side by side do not race on go.mod.
package tools

import (
	_ "github.com/ebitengine/purego"
	_ "github.com/gavv/httpexpect/v2"
	_ "github.com/go-git/go-git/v5"
	_ "github.com/olekukonko/tablewriter"
	_ "github.com/rogpeppe/go-internal/testscript"
	_ "github.com/schollz/progressbar/v3"
	_ "golang.org/x/term"
)
