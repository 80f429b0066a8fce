// Package udiff writes line-based unified diffs (the format of diff -u and
// git diff) for boundary reports.
package udiff

import (
	"fmt"
	"strings"
)

// Context is the number of unchanged lines shown around each change.
const Context = 3

type opKind byte

const (
	opEqual opKind = ' '
	opDel   opKind = '-'
	opIns   opKind = '+'
)

type op struct {
	kind opKind
	a, b int // line index in a (for equal/del) and b (for equal/ins)
}

// Unified returns the unified diff from a to b with file labels fromName and
// toName, or "" when the texts are equal. Lines are split on "\n"; a missing
// final newline is marked as git marks it.
func Unified(fromName, toName, a, b string) string {
	if a == b {
		return ""
	}
	al, bl := splitLines(a), splitLines(b)
	ops := diff(al, bl)
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", fromName, toName)
	// Group ops into hunks separated by more than 2*Context equal lines.
	i := 0
	for i < len(ops) {
		// find next change
		for i < len(ops) && ops[i].kind == opEqual {
			i++
		}
		if i >= len(ops) {
			break
		}
		start := i - Context
		if start < 0 {
			start = 0
		}
		end := i
		for end < len(ops) {
			if ops[end].kind != opEqual {
				end++
				continue
			}
			// run of equal lines
			j := end
			for j < len(ops) && ops[j].kind == opEqual {
				j++
			}
			if j >= len(ops) || j-end > 2*Context {
				end += min(Context, j-end)
				break
			}
			end = j
		}
		writeHunk(&sb, ops[start:end], al, bl)
		i = end
	}
	return sb.String()
}

func writeHunk(sb *strings.Builder, ops []op, al, bl []string) {
	aStart, bStart := -1, -1
	aLen, bLen := 0, 0
	for _, o := range ops {
		if o.kind != opIns {
			if aStart < 0 {
				aStart = o.a
			}
			aLen++
		}
		if o.kind != opDel {
			if bStart < 0 {
				bStart = o.b
			}
			bLen++
		}
	}
	if aStart < 0 {
		aStart = ops[0].a
	}
	if bStart < 0 {
		bStart = ops[0].b
	}
	fmt.Fprintf(sb, "@@ -%s +%s @@\n", rangeOf(aStart, aLen), rangeOf(bStart, bLen))
	for _, o := range ops {
		var line string
		if o.kind == opIns {
			line = bl[o.b]
		} else {
			line = al[o.a]
		}
		sb.WriteByte(byte(o.kind))
		if strings.HasSuffix(line, "\n") {
			sb.WriteString(line)
		} else {
			sb.WriteString(line)
			sb.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

func rangeOf(start, n int) string {
	// Unified diff line numbers are 1-based; an empty range names the line before.
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// splitLines splits s after each "\n", keeping the newline.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// diff computes a shortest edit script with Myers' O(ND) algorithm, after
// trimming the common prefix and suffix.
func diff(a, b []string) []op {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var ops []op
	for i := 0; i < pre; i++ {
		ops = append(ops, op{opEqual, i, i})
	}
	ops = append(ops, myers(a[pre:len(a)-suf], b[pre:len(b)-suf], pre, pre)...)
	for k := suf; k > 0; k-- {
		ops = append(ops, op{opEqual, len(a) - k, len(b) - k})
	}
	return ops
}

// maxEdits bounds the work of one diff; a larger change is shown as a whole
// replacement of the changed middle.
const maxEdits = 2000

func myers(a, b []string, aOff, bOff int) []op {
	n, m := len(a), len(b)
	if n == 0 && m == 0 {
		return nil
	}
	maxD := min(n+m, maxEdits)
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	// trace[d] holds v[k] for k in [-d-1, d+1] as it was before step d.
	var trace [][]int
	found := false
	for d := 0; d <= maxD && !found; d++ {
		snap := make([]int, 2*d+3)
		copy(snap, v[off-d-1:off+d+2])
		trace = append(trace, snap)
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = true
				break
			}
		}
	}
	if !found {
		ops := make([]op, 0, n+m)
		for i := 0; i < n; i++ {
			ops = append(ops, op{opDel, aOff + i, bOff})
		}
		for j := 0; j < m; j++ {
			ops = append(ops, op{opIns, aOff + n, bOff + j})
		}
		return ops
	}
	at := func(d, k int) int { return trace[d][k+d+1] }
	var rev []op
	x, y := n, m
	for d := len(trace) - 1; d > 0; d-- {
		k := x - y
		var prevK int
		if k == -d || (k != d && at(d, k-1) < at(d, k+1)) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := at(d, prevK)
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			x--
			y--
			rev = append(rev, op{opEqual, aOff + x, bOff + y})
		}
		if x == prevX {
			y--
			rev = append(rev, op{opIns, aOff + x, bOff + y})
		} else {
			x--
			rev = append(rev, op{opDel, aOff + x, bOff + y})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, op{opEqual, aOff + x, bOff + y})
	}
	ops := make([]op, len(rev))
	for i := range rev {
		ops[i] = rev[len(rev)-1-i]
	}
	return ops
}
