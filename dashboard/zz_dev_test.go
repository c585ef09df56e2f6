package dashboard

import (
	"net/http"
	"os"
	"testing"
	"time"
)

func TestDevServe(t *testing.T) {
	if os.Getenv("DASH_DEV") == "" {
		t.Skip()
	}
	f := fakeWithData()
	h := mustHandler(t, f, Options{EnableActions: true})
	srv := &http.Server{Addr: "127.0.0.1:18777", Handler: h}
	go srv.ListenAndServe()
	time.Sleep(60 * time.Second)
	srv.Close()
}
