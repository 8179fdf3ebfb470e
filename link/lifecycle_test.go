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
	want := map[State]map[Trigger]State{
		Stopped: {
			OnStart: Preparing, OnPrepared: bad, OnPause: bad, OnResume: bad,
			OnFail: bad, OnRetry: bad, OnStop: Stopped,
		},
		Preparing: {
			OnStart: bad, OnPrepared: Mirroring, OnPause: Paused, OnResume: Preparing,
			OnFail: Failed, OnRetry: bad, OnStop: Stopped,
		},
		Mirroring: {
			OnStart: bad, OnPrepared: bad, OnPause: Paused, OnResume: Mirroring,
			OnFail: Failed, OnRetry: bad, OnStop: Stopped,
		},
		Paused: {
			OnStart: bad, OnPrepared: bad, OnPause: Paused, OnResume: Preparing,
			OnFail: Failed, OnRetry: bad, OnStop: Stopped,
		},
		Failed: {
			OnStart: bad, OnPrepared: bad, OnPause: Paused, OnResume: bad,
			OnFail: bad, OnRetry: Preparing, OnStop: Stopped,
		},
	}
	if len(want) != len(States) {
		t.Fatalf("table covers %d states, there are %d", len(want), len(States))
	}
	for _, s := range States {
		if len(want[s]) != len(Triggers) {
			t.Fatalf("table row %s covers %d events, there are %d", s, len(want[s]), len(Triggers))
		}
		for _, e := range Triggers {
			got, err := Next(s, e)
			if w := want[s][e]; w == bad {
				var te *TransitionError
				if !errors.As(err, &te) || got != s || te.From != s || te.Trigger != e {
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
		for _, e := range Triggers {
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
	if State(9).String() != "STATE(9)" || Trigger(99).String() != "trigger(99)" {
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
