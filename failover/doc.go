// Package failover moves a link's consumers to its mirror (DESIGN §13): the
// group offset sync, which commits the translated offsets of the source
// consumer groups a link selects to the same groups at the destination on
// an interval, and the failover, which in one step waits until the link has
// mirrored up to the source's last stable offsets, syncs the groups a last
// time and pauses the link.
//
// # Concept
//
// A Mover does this for one link through a small interface (Link): the
// link's state, a pause, the anchors of its running session and offset
// translation (package translate). It never reaches into the link's
// session or pipeline. The decisions of a group sync round are planGroup, a
// pure function; the Mover does the I/O.
//
// # Invariants
//
//   - A destination group with active members, one whose state the
//     destination does not report as Empty or Dead, and one it does not
//     describe (left out of its answer, or answered with an error) are
//     left alone: unknown is not inactive.
//   - A destination group is only moved forward, never back past where it
//     read by itself.
//   - Offsets are committed only while this agent's session of the link is
//     the live one (Link.Live: MIRRORING, within its lease), checked before
//     each commit: a standby agent, a fenced, paused or failed link commit
//     nothing.
//   - A failover reports done only when every partition the link's
//     topics select is caught up with the source's last stable offset and
//     the source holds nothing past it (an undecided transaction's records
//     and those behind it count as lag, with the reason), or lag is
//     allowed and reported; the final group sync succeeded; and the link
//     is PAUSED. Otherwise the link is left mirroring.
//   - A failover ends: its catch-up wait is bounded by Options.Timeout and
//     its wait for PAUSED by Config.PauseTimeout, and a resume that
//     replaced its pause (the link's last command wins) ends it at once.
//   - Refusals name the permission that is missing (package access).
//
// # Goroutines
//
// Mover.Run runs on its caller's goroutine (the link's Run starts it and
// waits for it): it starts the group sync's goroutine (with a Groups
// selector; a round every GroupSyncInterval, rounds serialised by a mutex
// so that a failover's final round never runs beside a periodic one), runs
// failovers one at a time itself, and returns after ctx ended and the group
// sync goroutine returned, with the sync's clients closed. Start hands a
// failover to Run through a channel of one, admitted by an atomic flag.
package failover
