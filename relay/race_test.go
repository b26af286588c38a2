//go:build race

package relay_test

// raceDetector is set in a -race build, which runs several times slower:
// the largest tests size their workload by it.
const raceDetector = true
