//go:build race

package silero

// raceEnabled shortens the slowest tests under the race detector.
const raceEnabled = true
