package peer

import (
	"flag"
	"fmt"
	"sync"
	"time"
)

// ChangeTool is the name of the tool a peer started with -change offers:
// a call of it changes the server's tools at once, so that a test decides
// when each change happens instead of waiting for a timer. Its one
// argument, "what", is one of ChangeAdd, ChangeRemove and ChangeReshape.
const ChangeTool = "change"

// ShapeTool is the name of the tool whose input schema ChangeReshape
// flips between two forms, keeping its name: a client that compares
// whole definitions must see it changed, not removed and added.
const ShapeTool = "shape"

// What a call of ChangeTool does, by its argument "what".
const (
	// ChangeAdd adds FlickerTool (if it is not there).
	ChangeAdd = "add"
	// ChangeRemove removes FlickerTool (if it is there).
	ChangeRemove = "remove"
	// ChangeReshape gives ShapeTool its other input schema: narrow takes
	// a string "text", wide takes "text" and an integer "times" too.
	ChangeReshape = "reshape"
)

// Shape names a form of ShapeTool's input schema.
type Shape string

// The two forms of ShapeTool's input schema; a server starts narrow.
const (
	Narrow Shape = "narrow"
	Wide   Shape = "wide"
)

// Changer carries out calls of ChangeTool on one server through the
// SDK-specific functions it is given, and keeps what ShapeTool's schema
// is now. Calls are serialized, so that two changes never interleave.
type Changer struct {
	// Add adds FlickerTool, Remove removes it, and Reshape (re)registers
	// ShapeTool with the form given, replacing the one there.
	Add, Remove func()
	Reshape     func(Shape)

	mu      sync.Mutex
	shape   Shape
	flicker bool
}

// Do carries out the change what names and returns a line that tells
// what it did, for the tool's result.
func (c *Changer) Do(what string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch what {
	case ChangeAdd:
		if !c.flicker {
			c.Add()
			c.flicker = true
		}
		return FlickerTool + " is there", nil
	case ChangeRemove:
		if c.flicker {
			c.Remove()
			c.flicker = false
		}
		return FlickerTool + " is gone", nil
	case ChangeReshape:
		if c.shape == Wide {
			c.shape = Narrow
		} else {
			c.shape = Wide
		}
		c.Reshape(c.shape)
		return fmt.Sprintf("%s is %s now", ShapeTool, c.shape), nil
	}
	return "", fmt.Errorf("what is %q; want %s, %s or %s", what, ChangeAdd, ChangeRemove, ChangeReshape)
}

// ChangeFlags checks a peer's -change against its -flicker period and
// returns the period to use: the calls of ChangeTool and the timer would
// both add and remove FlickerTool, so with -change the timer is off, and
// a period given with it is an error.
func ChangeFlags(change bool, period time.Duration) (time.Duration, error) {
	if !change {
		return period, nil
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "flicker" })
	if set && period > 0 {
		return 0, fmt.Errorf("-change and -flicker %v: with -change, calls of %s add and remove %s, not a timer", period, ChangeTool, FlickerTool)
	}
	return 0, nil
}
