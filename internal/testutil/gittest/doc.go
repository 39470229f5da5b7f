// Package gittest is the real-git test harness of fleetwave: it creates bare
// remotes in t.TempDir() and changes them the way a person would, with the git
// CLI (clone, commit, push), so that code under test meets exactly what a real
// user's push produces.
//
// Every git command runs with an isolated configuration (GIT_CONFIG_GLOBAL
// pointing at the null device, GIT_CONFIG_NOSYSTEM=1) and a fixed identity,
// "Alice <alice@example.com>", with a fixed date, so tests do not depend on
// the machine's git setup and commit hashes are reproducible. Commands that
// fail end the test with the command's output.
//
// Deletions are passed to Push as a separate list of paths (deletes), so an
// empty string in files is an ordinary empty file.
package gittest
