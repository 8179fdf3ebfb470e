// Package link runs one mirroring link: the lifecycle of DESIGN §8 and the
// pipeline that moves batches from the source cluster to the destination.
//
// The lifecycle is a pure state machine (state.go); reconciliation of a
// destination tail against the source (walk.go) is pure as well. The Link
// type drives them with I/O.
package link
