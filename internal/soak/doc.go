// Package soak is redq's soak: it runs the library as a production user
// would, on a private redis-server or Redis Cluster, while it SIGKILLs and
// SIGSTOPs consumer processes and restarts, fails over or reshards Redis,
// and then checks the reliability contract from the workers' logs and what
// is left in Redis. The redq command serves it as "redq soak" and re-runs
// itself as "redq soak-worker" for each consumer process; see Details.
package soak

// WorkerCommandName is the command under which the redq binary runs
// WorkerCommand: the soak starts its consumer processes as
// "<this program> soak-worker <flags>".
const WorkerCommandName = "soak-worker"
