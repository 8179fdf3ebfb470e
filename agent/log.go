package agent

import (
	"io"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/config"
)

// NewLogger returns the root logger, named "mirrord", at the agent's
// log_level and in its log_format (text or json), writing to w. Components
// name their own sub-loggers (Named("link").With("link", name)).
func NewLogger(a config.Agent, w io.Writer) hclog.Logger {
	level := hclog.LevelFromString(a.LogLevel)
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       "mirrord",
		Level:      level,
		Output:     w,
		JSONFormat: a.LogFormat == "json",
	})
}

// kgoLogger passes franz-go's client logs to hclog. kgo logs every
// connection and metadata refresh at info, so its info lines are logged at
// debug and its debug lines at trace; at the agent's default level only its
// warnings and errors appear.
type kgoLogger struct {
	log   hclog.Logger
	level kgo.LogLevel
}

func newKgoLogger(log hclog.Logger) kgoLogger {
	level := kgo.LogLevelWarn
	switch {
	case log.IsTrace():
		level = kgo.LogLevelDebug
	case log.IsDebug():
		level = kgo.LogLevelInfo
	}
	return kgoLogger{log: log, level: level}
}

// Level implements kgo.Logger.
func (k kgoLogger) Level() kgo.LogLevel { return k.level }

// Log implements kgo.Logger.
func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var l hclog.Level
	switch level {
	case kgo.LogLevelError:
		l = hclog.Error
	case kgo.LogLevelWarn:
		l = hclog.Warn
	case kgo.LogLevelInfo:
		l = hclog.Debug
	case kgo.LogLevelDebug:
		l = hclog.Trace
	default:
		return
	}
	k.log.Log(l, msg, keyvals...)
}
