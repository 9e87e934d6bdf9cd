//go:build !invariants

package proto

const invariantsEnabled = false
