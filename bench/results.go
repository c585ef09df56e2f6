package main

import "time"

// Direction says which way a metric improves.
type Direction string

const (
	higherIsBetter Direction = "higher"
	lowerIsBetter  Direction = "lower"
)

// sample is one measured value: one metric of one workload for one
// system in one repetition.
type sample struct {
	Workload string    `json:"workload"`
	Metric   string    `json:"metric"`
	Unit     string    `json:"unit"`
	Better   Direction `json:"better"`
	System   string    `json:"system"`
	Rep      int       `json:"rep"`
	Value    float64   `json:"value"`
	Error    string    `json:"error,omitempty"` // set when the run failed; Value is then 0
}

// machine describes where and how the results were measured.
type machine struct {
	Date         time.Time `json:"date"`
	Command      string    `json:"command"`
	CPUs         int       `json:"cpus"`
	CPUModel     string    `json:"cpu_model,omitempty"`
	OS           string    `json:"os"`
	Arch         string    `json:"arch"`
	GoVersion    string    `json:"go_version"`
	RedisVersion string    `json:"redis_version"`
	RedisAddr    string    `json:"redis_addr"`
	PrivateRedis bool      `json:"private_redis"` // started by the bench itself
	N            int       `json:"n"`
	Reps         int       `json:"reps"`
	PayloadSize  int       `json:"payload_size"`
}

// report is everything a bench run produced, as written to results.json.
type report struct {
	Machine machine  `json:"machine"`
	Systems []string `json:"systems"` // column order; the first is redq
	Samples []sample `json:"samples"`
}
