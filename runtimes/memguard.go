package runtimes

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/ggml"
)

// MemoryOverhead is the fixed part of a load's memory estimate (128 MiB).
const MemoryOverhead = 128 << 20

// mib is one mebibyte, the unit of min_free_memory_mb.
const mib = 1 << 20

// Footprint is the memory guard's estimate for one model entry.
type Footprint struct {
	// Weights is the size in bytes of what the model loads: the weights
	// file or tree and the auxiliary files its entry names.
	Weights uint64
	// Estimate is 1.5 × Weights + MemoryOverhead.
	Estimate uint64
	// Files says what was measured, for messages (e.g. "/m/model.gguf").
	Files string
}

// EstimateMemory measures what loading m will take (wire-api 3.2): the
// weights are the model path itself when it is a file; for a folder, the
// file named by `weight` (relative to the folder) when it exists, else
// model.gguf, else the folder's only *.gguf, else the whole tree. The
// `config` and `weight` files the entry names relative to the model's
// folder are added when they exist and were not counted yet. The estimate
// is 1.5 × weights + 128 MiB.
//
// ok is false when there is nothing to estimate: an empty or missing path
// (the family reports that better) or a folder with several *.gguf files
// and none selected, which the guard skips rather than guess. err is set
// for a folder that cannot be read.
func EstimateMemory(m config.Model) (fp Footprint, ok bool, err error) {
	if m.Path == "" {
		return Footprint{}, false, nil
	}
	st, err := os.Stat(m.Path)
	if err != nil {
		return Footprint{}, false, nil
	}
	counted := map[string]bool{}
	var files []string
	var total uint64
	add := func(p string, size int64) {
		counted[filepath.Clean(p)] = true
		files = append(files, p)
		total += uint64(max(size, 0))
	}
	dir := filepath.Dir(m.Path)
	tree := "" // the folder counted whole, if any
	switch {
	case st.Mode().IsRegular():
		add(m.Path, st.Size())
	case st.IsDir():
		dir = m.Path
		weights, ambiguous, err := pickWeights(m.Path, m.Weight)
		if err != nil {
			return Footprint{}, false, err
		}
		if ambiguous {
			return Footprint{}, false, nil
		}
		if weights != "" {
			fi, err := os.Stat(weights)
			if err != nil {
				return Footprint{}, false, err
			}
			add(weights, fi.Size())
		} else {
			size, err := treeSize(m.Path)
			if err != nil {
				return Footprint{}, false, err
			}
			add(m.Path, int64(size))
			files[len(files)-1] = m.Path + " (whole folder)"
			tree = filepath.Clean(m.Path)
		}
	default:
		return Footprint{}, false, nil
	}
	for _, aux := range []string{m.Config, m.Weight} {
		if aux == "" || filepath.IsAbs(aux) {
			continue
		}
		p := filepath.Join(dir, aux)
		if counted[p] || (tree != "" && within(tree, p)) {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			add(p, fi.Size())
		}
	}
	return Footprint{Weights: total, Estimate: total + total/2 + MemoryOverhead, Files: strings.Join(files, " + ")}, true, nil
}

// pickWeights chooses the weights file of a model folder: the `weight`
// selector, model.gguf, or the only *.gguf. It returns "" when the folder
// has no *.gguf (the whole tree counts) and ambiguous when it has several
// and none is selected.
func pickWeights(dir, weight string) (path string, ambiguous bool, err error) {
	regular := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.Mode().IsRegular()
	}
	if weight != "" && !filepath.IsAbs(weight) && regular(filepath.Join(dir, weight)) {
		return filepath.Join(dir, weight), false, nil
	}
	if p := filepath.Join(dir, "model.gguf"); regular(p) {
		return p, false, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", false, err
	}
	var ggufs []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if strings.EqualFold(filepath.Ext(e.Name()), ".gguf") && regular(p) {
			ggufs = append(ggufs, p)
		}
	}
	switch len(ggufs) {
	case 0:
		return "", false, nil
	case 1:
		return ggufs[0], false, nil
	}
	return "", true, nil
}

// treeSize adds up the regular files under dir, following symbolic links to
// files (not to folders).
func treeSize(dir string) (uint64, error) {
	var total uint64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		fi, err := os.Stat(p)
		if err != nil {
			if d.Type()&fs.ModeSymlink != 0 {
				return nil // a dangling link weighs nothing
			}
			return err
		}
		if fi.Mode().IsRegular() {
			total += uint64(max(fi.Size(), 0))
		}
		return nil
	})
	return total, err
}

func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// MemoryGuard refuses loads that would not fit in memory (min_free_memory_mb,
// wire-api 3.2). A nil *MemoryGuard is off and allows everything.
type MemoryGuard struct {
	headroomMB int64
	host       func() (uint64, error)
	device     func() (uint64, bool, error)
	deviceName string
	log        *slog.Logger
}

// NewMemoryGuard returns the guard the options ask for, or nil when
// min_free_memory_mb is 0 (off). Without probes in o it reads the host's
// MemAvailable and, for a non-CPU Env.Compute, the device's free memory as
// ggml reports it.
func NewMemoryGuard(o Options) *MemoryGuard {
	if o.Config == nil || o.Config.MinFreeMemoryMb <= 0 {
		return nil
	}
	g := &MemoryGuard{headroomMB: o.Config.MinFreeMemoryMb, host: o.FreeMemory, device: o.FreeDeviceMemory, log: o.Logger}
	if g.log == nil {
		g.log = o.Env.Logger
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.host == nil {
		g.host = HostMemAvailable
	}
	g.deviceName = "the compute device"
	if g.device == nil && o.Env.Compute != nil {
		g.device = deviceFree(o.Env.Compute)
		g.deviceName = o.Env.Compute.String()
	}
	return g
}

// On reports whether the guard checks loads.
func (g *MemoryGuard) On() bool { return g != nil }

// Check decides whether model m may load now. It returns nil when the guard
// is off, when m cannot be estimated (missing path, ambiguous multi-GGUF
// folder) or when free memory cannot be read (logged: the guard fails
// open), and a 503 insufficient_memory error naming the model, the
// estimate, the free memory and the setting when it does not fit.
func (g *MemoryGuard) Check(m config.Model) error {
	if g == nil {
		return nil
	}
	fp, ok, err := EstimateMemory(m)
	if err != nil {
		g.log.Warn("memory guard: cannot measure the model, not checking it", "model", m.ID, "path", m.Path, "err", err)
		return nil
	}
	if !ok {
		g.log.Info("memory guard: no estimate (missing path, or several .gguf files and no model.gguf or weight selector), not checking", "model", m.ID, "path", m.Path)
		return nil
	}
	headroom := uint64(g.headroomMB) * mib
	need := fp.Estimate + headroom
	free, err := g.host()
	if err != nil {
		g.log.Warn("memory guard: cannot read free host memory, not checking", "model", m.ID, "err", err)
	} else if need > free {
		return g.refuse(m, fp, free, "host memory (MemAvailable)")
	}
	if g.device != nil {
		free, ok, err := g.device()
		switch {
		case err != nil:
			g.log.Warn("memory guard: cannot read free device memory, not checking it", "model", m.ID, "err", err)
		case ok && need > free:
			return g.refuse(m, fp, free, "memory on "+g.deviceName)
		}
	}
	return nil
}

func (g *MemoryGuard) refuse(m config.Model, fp Footprint, free uint64, where string) error {
	return apierror.Memoryf("cannot load model %q: it needs about %s (1.5 × %s of weights in %s + 128 MiB) plus min_free_memory_mb=%d of headroom, but only %s of %s is free; unload a model (POST /v1/tasks/unload_models) or lower min_free_memory_mb (0 turns the memory guard off)",
		m.ID, formatMiB(fp.Estimate), formatMiB(fp.Weights), fp.Files, g.headroomMB, formatMiB(free), where)
}

// formatMiB writes n bytes in MiB, or KiB and bytes when smaller.
func formatMiB(n uint64) string {
	switch {
	case n < 1<<10:
		return strconv.FormatUint(n, 10) + " B"
	case n < mib:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatFloat(float64(n)/mib, 'f', 1, 64) + " MiB"
}

// HostMemAvailable reads MemAvailable from /proc/meminfo: the memory the
// kernel can give new allocations without swapping.
func HostMemAvailable() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("reading free memory: %w", err)
	}
	defer f.Close()
	return parseMemAvailable(f)
}

// parseMemAvailable finds the "MemAvailable: N kB" line of a meminfo file.
func parseMemAvailable(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, found := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !found {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("reading free memory: unexpected /proc/meminfo line %q", sc.Text())
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading free memory: unexpected /proc/meminfo line %q", sc.Text())
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading free memory: %w", err)
	}
	return 0, errors.New("reading free memory: /proc/meminfo has no MemAvailable line (Linux 3.14 or newer has it)")
}

// deviceFree returns a probe of the free memory of b's device, or nil for a
// CPU device (its memory is the host's, checked already). ggml's Device
// value is a snapshot taken at startup, so the probe lists the devices again
// to get the current figure; a device reporting no total is not checked.
func deviceFree(b *ggml.Backend) func() (uint64, bool, error) {
	dev := b.Device()
	if b.Kind() == "cpu" || dev.Type == "cpu" {
		return nil
	}
	lib := b.Library()
	return func() (uint64, bool, error) {
		for _, d := range lib.Devices() {
			if d.Index == dev.Index {
				return d.MemoryFree, d.MemoryTotal > 0, nil
			}
		}
		return 0, false, nil
	}
}
