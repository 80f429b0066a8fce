package harness

import (
	"fmt"
	"io"
	"sync"

	"github.com/schollz/progressbar/v3"
)

// progress shows how far a run is: a bar on a terminal, one plain line per
// step otherwise (CI logs).
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	bar   *progressbar.ProgressBar
	done  int
	total int
}

func newProgress(w io.Writer, terminal bool, total int) *progress {
	p := &progress{w: w, total: total}
	if terminal && total > 0 {
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("checkpoints"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionClearOnFinish(),
		)
	}
	return p
}

func (p *progress) add(n int, what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if p.bar != nil {
		p.bar.Describe(what)
		_ = p.bar.Add(n)
		return
	}
	fmt.Fprintf(p.w, "[%d/%d] %s\n", p.done, p.total, what)
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
	}
}
