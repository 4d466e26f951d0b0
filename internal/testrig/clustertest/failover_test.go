package clustertest_test

import (
	"testing"
	"time"

	"tidings/internal/testrig/clustertest"
	"tidings/internal/testrig/testbroker"
	"tidings/internal/testrig/testlb"
	"tidings/mcp"
)

// failoverBroker is a broker that outlives one of its servers: start
// returns its URL and a kill that takes the server the tasks live on
// down for good.
type failoverBroker struct {
	name  string
	start func(t testing.TB) (url string, kill func())
}

// tasksStream is the JetStream stream of the tasks bucket of the
// subject the NATS cluster's seeds name ("tidings.test").
const tasksStream = "KV_tidings_2Etest_tasks"

func failoverBrokers() []failoverBroker {
	return []failoverBroker{
		{"nats-cluster", func(t testing.TB) (string, func()) {
			c := testbroker.StartNATSCluster(t, 3)
			return c.Seeds(), func() {
				i := c.StreamLeader(tasksStream)
				if i < 0 {
					t.Fatalf("no server leads %s", tasksStream)
				}
				c.Kill(i)
			}
		}},
		{"redis-sentinel", func(t testing.TB) (string, func()) {
			s := testbroker.StartSentinel(t)
			return s.URL(), func() { s.KillPrimary() }
		}},
	}
}

// TestTaskAcrossBrokerFailover: three replicas behind nginx share a
// broker of three servers (a NATS cluster, or Redis with Sentinels). A
// task is under way, followed over a listen, when the server its record
// lives on is killed: the leader of the NATS tasks bucket, or the Redis
// primary. The task goes through the rest of its life as if nothing had
// happened: it asks its question, takes the answer given through another
// replica, completes with its result, and the listen (listened again if
// the failover ended it, as a client does) and tasks/get tell each step.
func TestTaskAcrossBrokerFailover(t *testing.T) {
	for _, b := range failoverBrokers() {
		t.Run(b.name, func(t *testing.T) {
			url, kill := b.start(t)
			e := newTaskEnv(t, url, nil, testlb.StartNginx, nil)
			e.broken = true // the buses lose their server: gaps and re-notifications are expected
			id := e.create(runner, "alice", "ask")
			recv(t, e.rounds, "the work to start")
			l := e.listenOn(listener, "alice's listen", "alice", map[string]any{"taskIds": []string{id}})
			l.expectTask(t, id, mcp.TaskWorking)

			killed := time.Now()
			kill()
			clustertest.WaitFor(t, "a task request to be answered after the kill", func() bool {
				return e.on(poller, "alice", mcp.MethodTasksGet, id, map[string]any{"taskId": id}).Result != nil
			})
			t.Logf("%s: the first task request was answered %v after the kill", b.name, time.Since(killed).Round(time.Millisecond))

			e.open() // the work asks for q
			task := e.await(&l, id, mcp.TaskInputRequired)
			if _, ok := task["inputRequests"].(map[string]any)["q.1"]; !ok {
				t.Fatalf("the listen told %v, want the request q.1", task)
			}
			clustertest.WaitFor(t, "the answer to be taken", func() bool {
				return e.on(listener, "alice", mcp.MethodTasksUpdate, id,
					map[string]any{"taskId": id, "inputResponses": map[string]any{"q.1": accepted("B")}}).Result != nil
			})
			if r := recv(t, e.rounds, "the answer to wake the work"); r.answer != "B" {
				t.Fatalf("the second round: %+v, want the answer B", r)
			}
			e.open() // the work completes
			if text := resultText(e.await(&l, id, mcp.TaskCompleted)); text != "told B" {
				t.Errorf("the listen told the result %q", text)
			}
			if text := resultText(e.waitStatus(poller, id, mcp.TaskCompleted)); text != "told B" {
				t.Errorf("tasks/get told the result %q", text)
			}
		})
	}
}

// await reads the listen *l until it tells task id in status, and
// returns the task. It passes over what else the listen tells (the same
// state again, after the replica re-read it), and listens again, on the
// same replica, when the stream ends, as a client does: a replica ends a
// listen whose read of a changed task failed, as it may while its store
// fails over.
func (e *taskEnv) await(l **listen, id string, status mcp.TaskStatus) map[string]any {
	e.t.Helper()
	deadline := time.After(clustertest.Wait)
	for {
		select {
		case m, ok := <-(*l).msgs:
			if !ok {
				*l = e.listenOn(listener, "alice's listen, again", "alice", map[string]any{"taskIds": []string{id}})
				continue
			}
			if m.Method != mcp.NotifyTasks || m.Params["taskId"] != id {
				continue
			}
			switch got := mcp.TaskStatus(m.Params["status"].(string)); {
			case got == status:
				return m.Params
			case got == mcp.TaskCompleted, got == mcp.TaskFailed, got == mcp.TaskCancelled:
				e.t.Fatalf("%s: the task ended %s, want %s: %s", (*l).name, got, status, m.raw)
			}
		case <-deadline:
			e.t.Fatalf("%s: task %s not %s within %v", (*l).name, id, status, clustertest.Wait)
		}
	}
}
