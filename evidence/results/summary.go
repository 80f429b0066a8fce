package results

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// Cell texts in the per-model tables.
const (
	CellReference = "ref"
	CellMatch     = "match"
	CellDiff      = "DIFF"
	CellError     = "error"
	CellMissing   = "-"
)

// Headline is the one-line verdict with the totals, such as
// "PASS: 64/64 requests matched, 80/80 compared responses equal, 0 required checks failed".
func (r *Results) Headline() string {
	verdict := "PASS"
	if !r.Passed {
		verdict = "FAIL"
	}
	t := r.Totals
	s := verdict + ": "
	if t.Requests > 0 || t.Compared > 0 {
		s += fmt.Sprintf("%d/%d requests matched, %d/%d compared responses equal, ", t.Matched, t.Requests, t.ComparedEqual, t.Compared)
	}
	s += fmt.Sprintf("%d/%d checks passed (%d required failed)", t.Checks-t.Failed, t.Checks, t.RequiredFailed)
	if t.Cross > 0 {
		s += fmt.Sprintf(", cross-backend %d/%d within tolerance", t.CrossWithin, t.Cross)
	}
	return s
}

func newTable(w io.Writer, markdown bool) *tablewriter.Table {
	// Headers are shown as written (step names such as unload-before).
	opts := []tablewriter.Option{tablewriter.WithHeaderAutoFormat(tw.Off)}
	if markdown {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewMarkdown()))
	}
	return tablewriter.NewTable(w, opts...)
}

// WriteSummary writes the summary: the headline, a startup table per
// backend, a variants x steps table per backend and model, the cross-backend
// table and the failures. markdown selects Markdown tables (summary.md);
// otherwise boxed text tables for a terminal.
func WriteSummary(w io.Writer, r *Results, markdown bool) error {
	h := func(level int, s string) {
		if markdown {
			fmt.Fprintf(w, "\n%s %s\n\n", strings.Repeat("#", level), s)
		} else {
			fmt.Fprintf(w, "\n%s\n", s)
		}
	}
	title := "Checkpoint parity: " + r.Plan.Name
	if r.Kind != "checkpoints" {
		title = "Evidence (" + r.Kind + ")"
		if r.Plan.Name != "" && r.Plan.Name != r.Kind {
			title += ": " + r.Plan.Name
		}
	}
	if markdown {
		fmt.Fprintf(w, "# %s\n\n", title)
	} else {
		fmt.Fprintf(w, "%s\n", title)
	}
	fmt.Fprintf(w, "%s\n", r.Headline())
	if r.Reference != "" {
		fmt.Fprintf(w, "\nReference variant: %s. Responses are compared after removing only the top-level `timing` object and the X-AudioCPP timing headers.\n", r.Reference)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "\nNote: %s\n", n)
	}
	if len(r.Variants) > 0 {
		h(2, "Variants")
		t := newTable(w, markdown)
		t.Header("variant", "source", "runtime", "slots", "warning", "args")
		for _, v := range r.Variants {
			src := v.Source
			if v.Ref != "" {
				src += " " + v.Ref
			}
			if v.Commit != "" {
				src += " @" + short(v.Commit)
			}
			if err := t.Append(v.Name, src, v.Runtime, v.Slots, yesNo(v.ExpectWarning, "required", "forbidden"), strings.Join(v.Args, " ")); err != nil {
				return err
			}
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	for _, b := range r.Backends {
		h(2, "Backend "+b.Name)
		fmt.Fprintf(w, "Detected: %s\n", b.Detection)
		if markdown {
			fmt.Fprintln(w)
		}
		if err := startupTable(w, r, b.Name, markdown); err != nil {
			return err
		}
		for _, model := range r.models(b.Name) {
			h(3, fmt.Sprintf("%s / %s", b.Name, model))
			if err := modelTable(w, r, b.Name, model, markdown); err != nil {
				return err
			}
		}
	}
	if len(r.CrossBackend) > 0 {
		h(2, "Across backends (reported, tolerance from the plan)")
		t := newTable(w, markdown)
		t.Header("model", "step", "variant", "backends", "numbers", "max abs diff", "within", "first out of tolerance")
		for _, x := range r.CrossBackend {
			where := ""
			if x.Path != "" {
				where = fmt.Sprintf("%s: %s vs %s", x.Path, x.Want, x.Got)
			}
			if err := t.Append(x.Model, x.Step, x.Variant, x.Against+" vs "+x.Backend, fmt.Sprint(x.Numbers),
				fmt.Sprintf("%.3g", x.MaxAbs), yesNo(x.Within, "yes", "NO"), where); err != nil {
				return err
			}
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	if len(r.Exchanges) == 0 && len(r.Checks) > 0 {
		// Reports of other tools: every check, not only the failures.
		h(2, fmt.Sprintf("Checks (%d)", len(r.Checks)))
		t := newTable(w, markdown)
		t.Header("check", "required", "result", "message")
		for _, c := range r.Checks {
			if err := t.Append(c.Name(), yesNo(c.Required, "yes", "no"), yesNo(c.Passed, "pass", "FAIL"), oneLine(c.Message)); err != nil {
				return err
			}
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	fails := r.Failures()
	h(2, fmt.Sprintf("Failures (%d)", len(fails)))
	if len(fails) == 0 {
		fmt.Fprintln(w, "None.")
		return nil
	}
	t := newTable(w, markdown)
	t.Header("check", "required", "message", "first difference", "want", "got")
	for _, c := range fails {
		if err := t.Append(c.Name(), yesNo(c.Required, "yes", "no"), oneLine(c.Message), c.Path, c.Want, c.Got); err != nil {
			return err
		}
	}
	return t.Render()
}

func startupTable(w io.Writer, r *Results, backend string, markdown bool) error {
	t := newTable(w, markdown)
	t.Header("variant", "pid", "ready ms", "warning printed", "exit", "shutdown ms", "startup")
	for _, s := range r.Startups {
		if s.Backend != backend {
			continue
		}
		exit := "-"
		switch {
		case s.ExitStatus != nil:
			exit = fmt.Sprint(*s.ExitStatus)
		case s.ExitSignal != "":
			exit = s.ExitSignal
		}
		state := "ready"
		if !s.Ready {
			state = "FAILED: " + oneLine(s.Error)
		}
		if err := t.Append(s.Variant, fmt.Sprint(s.PID), fmt.Sprint(s.ReadyMs), yesNo(s.WarningPrinted, "yes", "no"), exit, fmt.Sprint(s.ShutdownMs), state); err != nil {
			return err
		}
	}
	return t.Render()
}

// Cell returns what a per-model table shows for one variant and step.
func (r *Results) Cell(backend, variant, model, step string) string {
	var ex *Exchange
	for i := range r.Exchanges {
		e := &r.Exchanges[i]
		if e.Backend == backend && e.Variant == variant && e.Model == model && e.Step == step {
			ex = e
			break
		}
	}
	if ex == nil {
		return CellMissing
	}
	if ex.Error != "" {
		return CellError
	}
	if variant == r.Reference {
		return CellReference
	}
	for _, c := range r.Checks {
		if c.Kind == CheckMatch && c.Exchange == ex.ID {
			if c.Passed {
				return CellMatch
			}
			return CellDiff
		}
	}
	return CellMissing
}

func modelTable(w io.Writer, r *Results, backend, model string, markdown bool) error {
	steps := r.stepsOf(backend, model)
	t := newTable(w, markdown)
	header := append([]any{"variant"}, toAny(steps)...)
	header = append(header, "checks")
	t.Header(header...)
	for _, v := range r.variantsOf(backend) {
		row := []any{v}
		for _, s := range steps {
			row = append(row, r.Cell(backend, v, model, s))
		}
		passed, total := 0, 0
		for _, c := range r.Checks {
			if c.Backend == backend && c.Variant == v && c.Model == model && c.Kind != CheckMatch {
				total++
				if c.Passed {
					passed++
				}
			}
		}
		row = append(row, fmt.Sprintf("%d/%d", passed, total))
		if err := t.Append(row...); err != nil {
			return err
		}
	}
	return t.Render()
}

func (r *Results) models(backend string) []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range r.Exchanges {
		if e.Backend == backend && e.Model != "" && !seen[e.Model] {
			seen[e.Model] = true
			out = append(out, e.Model)
		}
	}
	return out
}

func (r *Results) variantsOf(backend string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(v string) {
		if v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	for _, v := range r.Variants {
		add(v.Name)
	}
	for _, e := range r.Exchanges {
		if e.Backend == backend {
			add(e.Variant)
		}
	}
	return out
}

func (r *Results) stepsOf(backend, model string) []string {
	order := map[string]int{}
	for i, s := range r.Steps {
		order[s] = i
	}
	var out []string
	seen := map[string]bool{}
	for _, e := range r.Exchanges {
		if e.Backend == backend && e.Model == model && !seen[e.Step] {
			seen[e.Step] = true
			out = append(out, e.Step)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		oi, okI := order[out[i]]
		oj, okJ := order[out[j]]
		if okI && okJ {
			return oi < oj
		}
		return okI && !okJ
	})
	return out
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func yesNo(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
