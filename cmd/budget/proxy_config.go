package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/tokenbudget/tokenbudget/budget"
)

// startConfig applies --config before the proxy serves (an error stops
// the start) and again on every SIGHUP until stopConfig: a reload that
// fails changes nothing (the apply is one transaction) and is logged, and
// the proxy serves on.
func (p *runningProxy) startConfig(ctx context.Context, m *Main, o proxyOptions) error {
	if o.config == "" {
		return nil
	}
	if err := p.applyConfig(ctx, m, o); err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-hup:
				if err := p.applyConfig(context.WithoutCancel(ctx), m, o); err != nil {
					o.log.Error("budget proxy: config not applied; nothing changed, serving on", "file", o.config, "err", err)
				}
			case <-done:
				return
			}
		}
	}()
	p.stopConfig = func() {
		signal.Stop(hup)
		close(done)
		<-stopped
	}
	return nil
}

// applyConfig applies o.config (without pruning) and logs what changed.
func (p *runningProxy) applyConfig(ctx context.Context, m *Main, o proxyOptions) error {
	changes, err := applyConfigFile(ctx, p.tracker, o.config, nil, m.Now(), budget.ApplyOptions{})
	if err != nil {
		return err
	}
	for i := range changes {
		o.log.Info("budget proxy: config change", "change", budget.FormatChange(&changes[i]))
	}
	o.log.Info("budget proxy: config applied", "file", o.config, "changes", len(changes))
	return nil
}
