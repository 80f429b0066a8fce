package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one running server.
type process struct {
	cmd     *exec.Cmd
	baseURL string
	done    chan struct{}
	waitErr error
	stdout  *os.File
	stderr  *os.File
	started time.Time
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startProcess(argv, env []string, dir, stdoutPath, stderrPath, baseURL string) (*process, error) {
	so, err := os.Create(stdoutPath)
	if err != nil {
		return nil, err
	}
	se, err := os.Create(stderrPath)
	if err != nil {
		so.Close()
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout = so
	cmd.Stderr = se
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &process{cmd: cmd, baseURL: baseURL, done: make(chan struct{}), stdout: so, stderr: se, started: time.Now()}
	if err := cmd.Start(); err != nil {
		so.Close()
		se.Close()
		return nil, fmt.Errorf("cannot start %s: %w", argv[0], err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		so.Close()
		se.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitStatus returns the exit code, or the signal that ended the process.
func (p *process) exitStatus() (*int, string) {
	st := p.cmd.ProcessState
	if st == nil {
		return nil, ""
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return nil, ws.Signal().String()
	}
	c := st.ExitCode()
	return &c, ""
}

// waitReady polls GET /health until it answers 200 with status "ok", the
// process exits, or the timeout passes.
func (p *process) waitReady(ctx context.Context, timeout time.Duration) (backend string, err error) {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var last string
	for {
		if p.exited() {
			code, sig := p.exitStatus()
			status := sig
			if code != nil {
				status = "exit status " + strconv.Itoa(*code)
			}
			return "", fmt.Errorf("server exited before it was ready (%s)", status)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.baseURL+"/health", nil)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var h struct {
				Status  string `json:"status"`
				Backend string `json:"backend"`
			}
			if resp.StatusCode == 200 && json.Unmarshal(body, &h) == nil && h.Status == "ok" {
				return h.Backend, nil
			}
			last = fmt.Sprintf("GET /health answered %d %s", resp.StatusCode, strings.TrimSpace(tail(string(body), 200)))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("server not ready within %s (last: %s)", timeout, last)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and waits; after the timeout it kills the process
// group. It reports whether the process exited by itself.
func (p *process) stop(timeout time.Duration) (clean bool, took time.Duration) {
	start := time.Now()
	if p.exited() {
		return true, 0
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true, time.Since(start)
	case <-time.After(timeout):
	}
	p.kill()
	return false, time.Since(start)
}

// kill ends the process and everything it started.
func (p *process) kill() {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// logTail returns the last bytes of a log file.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(tail(string(data), n))
}

// exchangeResult is one HTTP round trip.
type exchangeResult struct {
	status int
	header http.Header
	body   []byte
	dur    time.Duration
	err    error
}

func doRequest(ctx context.Context, client *http.Client, method, url, contentType string, body []byte) exchangeResult {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return exchangeResult{err: err}
	}
	if body == nil {
		req.Body = nil
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue interface{ Timeout() bool }
		if errors.As(err, &ue) && ue.Timeout() {
			return exchangeResult{err: fmt.Errorf("no answer within the request timeout: %w", err), dur: time.Since(start)}
		}
		return exchangeResult{err: err, dur: time.Since(start)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	res := exchangeResult{status: resp.StatusCode, header: resp.Header, body: data, dur: time.Since(start)}
	if err != nil {
		res.err = fmt.Errorf("reading the response body: %w", err)
	}
	return res
}
