// Package poll is the tests' one polling helper: wait for a condition with a
// deadline instead of sleeping, and check that a condition holds for a while.
// Tests call it rather than writing their own loop, so that every test polls
// at the same pace and fails with the condition's last explanation.
package poll
