package redq

import "context"

// Pause pauses the queue for every connection (see Queue.Pause).
func (q *redisQueue) Pause(ctx context.Context) error {
	return errNotImplemented
}

// Resume ends a pause of the queue (see Queue.Resume).
func (q *redisQueue) Resume(ctx context.Context) error {
	return errNotImplemented
}
