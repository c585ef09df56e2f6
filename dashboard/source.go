package dashboard

import (
	"context"
	"time"

	"github.com/redq/redq"
)

// source is the part of *redq.Inspector the dashboard reads and acts
// through. Tests substitute a fake to reach states that are hard to make
// on a real Redis (an outage between two requests, for example).
type source interface {
	Namespace() string
	Overview(ctx context.Context) (redq.Overview, error)
	Queues(ctx context.Context) ([]redq.QueueInfo, error)
	Queue(ctx context.Context, name string) (redq.QueueInfo, error)
	History(ctx context.Context, queue string, since time.Duration) ([]redq.RatePoint, error)
	Connections(ctx context.Context) ([]redq.ConnectionInfo, error)
	List(ctx context.Context, queue string, o redq.ListOptions) (redq.Page, error)
	Delivery(ctx context.Context, queue, id string) (redq.DeliveryInfo, error)
	Payload(ctx context.Context, queue, id string) ([]byte, error)
	Delete(ctx context.Context, queue, id string) error
	Retry(ctx context.Context, queue, id string) error
	RunNow(ctx context.Context, queue, key string) error
	Cancel(ctx context.Context, queue, key string) error
	Purge(ctx context.Context, queue string, state redq.DeliveryState) (int64, error)
	Pause(ctx context.Context, queue string) error
	Resume(ctx context.Context, queue string) error
	Timers(ctx context.Context) (map[string]redq.TimerStat, error)
	Rounds(ctx context.Context) (map[string]redq.RoundStat, error)
	ListRound(ctx context.Context, round string, cursor string, limit int) (redq.RoundPage, error)
	ScheduleSets(ctx context.Context) (map[string]redq.ScheduleSetStat, error)
	ScheduleSet(ctx context.Context, set string) (redq.ScheduleSetStat, error)
	ListSchedules(ctx context.Context, set, cursor string, limit int) (redq.SchedulePage, error)
	PauseSchedule(ctx context.Context, set, id string) error
	ResumeSchedule(ctx context.Context, set, id string) error
	RemoveSchedule(ctx context.Context, set, id string) error
}

var _ source = (*redq.Inspector)(nil)
