package link

import (
	"fmt"

	"github.com/seed83556561/mirrord/statestore"
)

// State is a link's lifecycle state (DESIGN §8): the state topic's link
// record carries the same values, so one type serves both.
type State = statestore.LinkState

// The lifecycle states.
const (
	Stopped   = statestore.Stopped
	Preparing = statestore.Preparing
	Mirroring = statestore.Mirroring
	Paused    = statestore.Paused
	Failed    = statestore.Failed
)

// States lists every state, for metrics and tests.
var States = statestore.LinkStates

// Event is something that moves a link from one state to another.
type Event uint8

const (
	EvStart    Event = iota // the agent starts the link
	EvPrepared              // PREPARING finished: session begun, state replayed, lease waited out, topics ready, tails reconciled, barrier committed
	EvPause                 // an operator paused the link
	EvResume                // an operator resumed it
	EvFail                  // an error the link cannot continue through (including being fenced)
	EvRetry                 // the FAILED backoff elapsed
	EvStop                  // shutdown
)

var eventNames = [...]string{"start", "prepared", "pause", "resume", "fail", "retry", "stop"}

func (e Event) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return fmt.Sprintf("event(%d)", e)
}

// Events lists every event, for tests.
var Events = []Event{EvStart, EvPrepared, EvPause, EvResume, EvFail, EvRetry, EvStop}

// ErrTransition is returned by Next for an event that makes no sense in the
// current state; the driver treats it as a bug.
type ErrTransition struct {
	From  State
	Event Event
}

func (e *ErrTransition) Error() string {
	return fmt.Sprintf("link: no transition from %s on %s", e.From, e.Event)
}

// Next is the lifecycle of DESIGN §8 as a pure function:
//
//	STOPPED ──start──▶ PREPARING ──prepared──▶ MIRRORING ⇄ PAUSED (pause/resume)
//	any running state ──fail──▶ FAILED ──retry (after backoff)──▶ PREPARING
//	any state ──stop──▶ STOPPED
//
// Resuming goes through PREPARING, so that every PREPARING → MIRRORING emits
// a barrier, also after PAUSED or FAILED. Pausing a link that is preparing
// or failed parks it in PAUSED; a repeated pause or resume is a no-op.
func Next(s State, e Event) (State, error) {
	switch e {
	case EvStop:
		return Stopped, nil
	case EvFail:
		switch s {
		case Preparing, Mirroring, Paused:
			return Failed, nil
		}
	case EvStart:
		if s == Stopped {
			return Preparing, nil
		}
	case EvPrepared:
		if s == Preparing {
			return Mirroring, nil
		}
	case EvPause:
		switch s {
		case Preparing, Mirroring, Failed, Paused:
			return Paused, nil
		}
	case EvResume:
		switch s {
		case Paused:
			return Preparing, nil
		case Preparing, Mirroring:
			return s, nil
		}
	case EvRetry:
		if s == Failed {
			return Preparing, nil
		}
	}
	return s, &ErrTransition{From: s, Event: e}
}
