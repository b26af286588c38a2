//go:build !race

package relay_test

// raceDetector is set in a -race build; see race_test.go.
const raceDetector = false
