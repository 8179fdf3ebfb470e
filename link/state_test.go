package link

import (
	"encoding/json"
	"errors"
	"testing"
)

// Guards the whole transition table of DESIGN §8: every (state, event) pair
// is listed, so adding a state or an event without deciding its transitions
// fails here.
func TestNextExhaustive(t *testing.T) {
	const bad = State(-1) // the event is refused in that state
	want := map[State]map[Event]State{
		Stopped: {
			EvStart: Preparing, EvPrepared: bad, EvPause: bad, EvResume: bad,
			EvFail: bad, EvRetry: bad, EvStop: Stopped,
		},
		Preparing: {
			EvStart: bad, EvPrepared: Mirroring, EvPause: Paused, EvResume: Preparing,
			EvFail: Failed, EvRetry: bad, EvStop: Stopped,
		},
		Mirroring: {
			EvStart: bad, EvPrepared: bad, EvPause: Paused, EvResume: Mirroring,
			EvFail: Failed, EvRetry: bad, EvStop: Stopped,
		},
		Paused: {
			EvStart: bad, EvPrepared: bad, EvPause: Paused, EvResume: Preparing,
			EvFail: Failed, EvRetry: bad, EvStop: Stopped,
		},
		Failed: {
			EvStart: bad, EvPrepared: bad, EvPause: Paused, EvResume: bad,
			EvFail: bad, EvRetry: Preparing, EvStop: Stopped,
		},
	}
	if len(want) != len(States) {
		t.Fatalf("table covers %d states, there are %d", len(want), len(States))
	}
	for _, s := range States {
		if len(want[s]) != len(Events) {
			t.Fatalf("table row %s covers %d events, there are %d", s, len(want[s]), len(Events))
		}
		for _, e := range Events {
			got, err := Next(s, e)
			if w := want[s][e]; w == bad {
				var te *ErrTransition
				if !errors.As(err, &te) || got != s || te.From != s || te.Event != e {
					t.Errorf("Next(%s, %s) = %s, %v; want refusal leaving %s", s, e, got, err, s)
				}
				if want := "link: no transition from " + s.String() + " on " + e.String(); err.Error() != want {
					t.Errorf("refusal says %q, want %q", err, want)
				}
			} else if err != nil || got != w {
				t.Errorf("Next(%s, %s) = %s, %v; want %s", s, e, got, err, w)
			}
		}
	}
}

// Guards that every way back to MIRRORING passes through PREPARING, where
// the barrier is emitted.
func TestEveryReturnToMirroringPrepares(t *testing.T) {
	for _, s := range States {
		for _, e := range Events {
			if got, err := Next(s, e); err == nil && got == Mirroring && s != Mirroring && s != Preparing {
				t.Errorf("%s --%s--> MIRRORING skips PREPARING", s, e)
			}
		}
	}
}

// Guards the names operators see in logs, /v1/links and metrics.
func TestStateNames(t *testing.T) {
	want := []string{"STOPPED", "PREPARING", "MIRRORING", "PAUSED", "FAILED"}
	for i, s := range States {
		if s.String() != want[i] {
			t.Errorf("state %d named %q, want %q", s, s, want[i])
		}
	}
	if State(9).String() != "STATE(9)" || Event(99).String() != "event(99)" {
		t.Error("unknown values not named by number")
	}
}

// Guards the JSON form of a state that /v1/links serves and clients read.
func TestStateJSON(t *testing.T) {
	for _, s := range States {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back State
		if err := json.Unmarshal(b, &back); err != nil || back != s {
			t.Errorf("%s: %s decodes to %s, %v", s, b, back, err)
		}
	}
	var s State
	if err := json.Unmarshal([]byte(`"SLEEPING"`), &s); err == nil {
		t.Error("unknown state name accepted")
	}
}
