package mcp

// List is one of the lists whose changes a server announces: the one name
// for "which list" that the server's registries, the change hub, listen
// filters and the client's cache share.
type List uint8

// The lists. Resource templates change together with resources: one
// notifications/resources/list_changed covers both.
const (
	ToolsList List = iota
	PromptsList
	ResourcesList

	// NumLists is how many lists there are: what PerList holds one of
	// each, and the first bit a bit set of lists leaves free.
	NumLists = int(ResourcesList) + 1
)

// PerList holds one T for each list, indexed by List: a listen's
// encoded notifications, the hub's followers of each list, a change's
// stamp per list.
type PerList[T any] [NumLists]T

// Lists returns every list, in a fixed order.
func Lists() []List { return []List{ToolsList, PromptsList, ResourcesList} }

var listNames = [...]struct{ name, method, changed string }{
	ToolsList:     {"tools", MethodToolsList, NotifyToolsListChanged},
	PromptsList:   {"prompts", MethodPromptsList, NotifyPromptsListChanged},
	ResourcesList: {"resources", MethodResourcesList, NotifyResourcesListChanged},
}

// String returns "tools", "prompts" or "resources".
func (l List) String() string {
	if int(l) < len(listNames) {
		return listNames[l].name
	}
	return "unknown"
}

// Method returns the method that reads the list.
func (l List) Method() string { return listNames[l].method }

// Changed returns the notification that announces a change of the list.
func (l List) Changed() string { return listNames[l].changed }

// ChangedList returns the list a list_changed notification announces.
func ChangedList(notification string) (List, bool) {
	for _, l := range Lists() {
		if listNames[l].changed == notification {
			return l, true
		}
	}
	return 0, false
}

// Wants reports whether the filter asks for changes of l.
func (f SubscriptionFilter) Wants(l List) bool {
	switch l {
	case ToolsList:
		return f.ToolsListChanged
	case PromptsList:
		return f.PromptsListChanged
	case ResourcesList:
		return f.ResourcesListChanged
	}
	return false
}

// Want makes the filter ask for changes of l.
func (f *SubscriptionFilter) Want(l List) {
	switch l {
	case ToolsList:
		f.ToolsListChanged = true
	case PromptsList:
		f.PromptsListChanged = true
	case ResourcesList:
		f.ResourcesListChanged = true
	}
}
