//go:build race

package vad

// raceEnabled shortens the slowest tests under the race detector.
const raceEnabled = true
