package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/orders/store"
)

// fenceReport is the output of fence.
type fenceReport struct {
	Key     string `json:"key"`
	Present bool   `json:"present"`
	Fence   int64  `json:"fence"` // 0 when the key has no counter
}

func (a *app) fenceCmd() *cobra.Command {
	var v flagVars
	const groups = withDB
	cmd := &cobra.Command{
		Use:   "fence KEY",
		Short: "Show the current fence of KEY in fence_counters (read only)",
		Long: `fence reads KEY's counter in fence_counters, in a read-only transaction: the
fence of the latest lease taken on KEY with a fencer. It prints "none" (0 in
JSON) when KEY never had one.`,
		Args: keyArg,
		RunE: a.phase.RunE(func(cmd *cobra.Command, args []string) error {
			s, err := a.settings(cmd, &v, groups)
			if err != nil {
				return err
			}
			return a.fence(cmd.Context(), s, args[0])
		}),
	}
	v.addFlags(cmd, groups)
	return cmd
}

func (a *app) fence(ctx context.Context, s settings, key string) error {
	conn, err := s.connectDB(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	tx, err := conn.BeginTx(qctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("fence: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rep := fenceReport{Key: key}
	err = tx.QueryRow(qctx, `SELECT value FROM fence_counters WHERE resource = $1`, key).Scan(&rep.Fence)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		return fmt.Errorf("fence: the database has no fence_counters table (run ordersd migrate): %w", err)
	case err != nil:
		return fmt.Errorf("fence: %w", err)
	default:
		rep.Present = true
	}
	if s.json {
		return a.writeJSON(rep)
	}
	if !rep.Present {
		fmt.Fprintf(a.stdout, "key %q: fence none (no lease with a fence was ever taken on it)\n", key)
		return nil
	}
	fmt.Fprintf(a.stdout, "key %q: fence %d\n", key, rep.Fence)
	return nil
}

// violation is one broken invariant as invariants reports it.
type violation struct {
	Invariant string `json:"invariant"`
	Detail    string `json:"detail"`
}

// invariantsReport is the output of invariants.
type invariantsReport struct {
	OK         bool        `json:"ok"`
	Violations []violation `json:"violations"`
}

func (a *app) invariantsCmd() *cobra.Command {
	var v flagVars
	const groups = withDB
	cmd := &cobra.Command{
		Use:   "invariants",
		Short: "Check the orders database's invariants once (store.CheckInvariants)",
		Long: `invariants runs every query of orders/store/invariants.sql once, read only
(store.CheckInvariants), and prints each row that breaks an invariant: no
negative stock, one order per idempotency key, stock balance, one charge per
payment request.

Exit status 1 when any invariant is broken.`,
		Args: cobra.NoArgs,
		RunE: a.phase.RunE(func(cmd *cobra.Command, _ []string) error {
			s, err := a.settings(cmd, &v, groups)
			if err != nil {
				return err
			}
			return a.invariants(cmd.Context(), s)
		}),
	}
	v.addFlags(cmd, groups)
	return cmd
}

func (a *app) invariants(ctx context.Context, s settings) error {
	conn, err := s.connectDB(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	vs, err := store.CheckInvariants(ctx, conn)
	if err != nil {
		return fmt.Errorf("invariants: %w", err)
	}
	rep := invariantsReport{OK: len(vs) == 0, Violations: make([]violation, len(vs))}
	for i, v := range vs {
		rep.Violations[i] = violation{Invariant: v.Invariant, Detail: v.Detail}
	}
	if s.json {
		if err := a.writeJSON(rep); err != nil {
			return err
		}
	} else if rep.OK {
		fmt.Fprintln(a.stdout, "invariants: none broken")
	} else {
		for _, v := range vs {
			fmt.Fprintf(a.stdout, "VIOLATION %s\n", v)
		}
	}
	if !rep.OK {
		return fmt.Errorf("%d invariant violation(s)", len(vs))
	}
	return nil
}
