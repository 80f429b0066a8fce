// Package ggml binds the ggml shared libraries through purego (no cgo): it
// opens the libraries from a folder, checks their version, lists devices and
// selects a compute backend, and wraps tensors, graphs and buffers so that Go
// code owns each of them exactly once.
package ggml

// Backend is one selected ggml compute backend (CPU, Vulkan or CUDA device)
// shared by every model family for the lifetime of the server.
type Backend struct {
	impl *backendImpl
}

type backendImpl struct{}
