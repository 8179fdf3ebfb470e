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

// Trigger is what moves a link from one lifecycle state to another (the
// pipeline of a session has inputs and actions instead; see events.go).
type Trigger uint8

const (
	OnStart    Trigger = iota // the agent starts the link
	OnPrepared                // PREPARING finished: session begun, state replayed, lease waited out, topics ready, tails reconciled, barrier committed
	OnPause                   // an operator paused the link
	OnResume                  // an operator resumed it
	OnFail                    // an error the link cannot continue through (including being fenced)
	OnRetry                   // the FAILED backoff elapsed
	OnStop                    // shutdown
)

var triggerNames = [...]string{"start", "prepared", "pause", "resume", "fail", "retry", "stop"}

func (t Trigger) String() string {
	if int(t) < len(triggerNames) {
		return triggerNames[t]
	}
	return fmt.Sprintf("trigger(%d)", t)
}

// Triggers lists every trigger, for tests.
var Triggers = []Trigger{OnStart, OnPrepared, OnPause, OnResume, OnFail, OnRetry, OnStop}

// TransitionError is returned by Next for a trigger that makes no sense in the
// current state; the driver treats it as a bug.
type TransitionError struct {
	From    State
	Trigger Trigger
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("link: no transition from %s on %s", e.From, e.Trigger)
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
func Next(s State, e Trigger) (State, error) {
	switch e {
	case OnStop:
		return Stopped, nil
	case OnFail:
		switch s {
		case Preparing, Mirroring, Paused:
			return Failed, nil
		}
	case OnStart:
		if s == Stopped {
			return Preparing, nil
		}
	case OnPrepared:
		if s == Preparing {
			return Mirroring, nil
		}
	case OnPause:
		switch s {
		case Preparing, Mirroring, Failed, Paused:
			return Paused, nil
		}
	case OnResume:
		switch s {
		case Paused:
			return Preparing, nil
		case Preparing, Mirroring:
			return s, nil
		}
	case OnRetry:
		if s == Failed {
			return Preparing, nil
		}
	}
	return s, &TransitionError{From: s, Trigger: e}
}
