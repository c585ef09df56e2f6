package main

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"
)

// The example serves the dashboard only to the user it names.
func TestExample(t *testing.T) {
	t.Setenv("DASHBOARD_USER", "")
	t.Setenv("DASHBOARD_PASSWORD", "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, "", addr) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	get := func(user, password string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+"/admin/redq/queues/emails", nil)
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	deadline := time.Now().Add(10 * time.Second)
	for get("ops", "ops") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the dashboard did not come up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range []struct{ user, password string }{{"", ""}, {"ops", "wrong"}, {"root", "ops"}} {
		if code := get(c.user, c.password); code != http.StatusUnauthorized {
			t.Errorf("user %q password %q: %d, want 401", c.user, c.password, code)
		}
	}
}
