package main

import (
	"log"
	"time"

	"github.com/redq/redq"
)

func main() {
	connection, err := redq.OpenConnection("cleaner", "tcp", "localhost:6379", 2, nil)
	if err != nil {
		panic(err)
	}

	cleaner := redq.NewCleaner(connection)

	for range time.Tick(time.Second) {
		returned, err := cleaner.Clean()
		if err != nil {
			log.Printf("failed to clean: %s", err)
			continue
		}
		log.Printf("cleaned %d", returned)
	}
}
